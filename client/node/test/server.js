'use strict';
// Starts the real gemmserve binary ($GEMMSERVE_BIN) on free loopback ports for
// a test and stops it afterwards. The server announces its ports on stdout, in
// order: `gemmserve listening on 127.0.0.1:PORT` (gRPC, the first line), the
// metrics port, then `gemmserve http on 127.0.0.1:PORT`. start() waits for the
// first line and the http one (with a deadline, never a sleep), and fails with
// the server's stderr if the process exits or stays silent instead.

const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const readline = require('node:readline');

const READY_LINE = /^gemmserve listening on 127\.0\.0\.1:(\d+)$/;
const HTTP_LINE = /^gemmserve http on 127\.0\.0\.1:(\d+)$/;

function serverBinary() {
  const binary = process.env.GEMMSERVE_BIN;
  if (!binary) {
    throw new Error('GEMMSERVE_BIN is not set: run through ctest, or set it to ' +
                    'build/bin/gemmserve');
  }
  fs.accessSync(binary, fs.constants.X_OK);
  return binary;
}

// If this process dies (a ctest timeout kills it), the kernel kills the server
// too: setpriv (util-linux) sets the parent-death signal and execs it.
function withParentDeathSignal(argv) {
  const found = spawnSync('sh', ['-c', 'command -v setpriv'], { encoding: 'utf8' });
  const setpriv = found.status === 0 ? found.stdout.trim() : '';
  return setpriv ? [setpriv, '--pdeathsig', 'KILL', ...argv] : argv;
}

class ServerProcess {
  constructor(flags = []) {
    this.flags = ['--grpc_port=0', '--metrics_port=0', '--http_port=0', '--host=127.0.0.1',
                  '--compute_threads=2', ...flags];
    this.stderr = '';
    this.address = null; // gRPC, "127.0.0.1:PORT"
    this.httpUrl = null; // "http://127.0.0.1:PORT"
    // The last --http_port wins; -1 turns HTTP off, and no http line comes.
    const httpPort = this.flags.filter((f) => f.startsWith('--http_port=')).pop();
    this.expectHttp = httpPort !== '--http_port=-1';
  }

  start(timeoutMs = 30000) {
    const [command, ...args] = withParentDeathSignal([serverBinary(), ...this.flags]);
    this.proc = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc.stderr.setEncoding('utf8');
    this.proc.stderr.on('data', (chunk) => { this.stderr = (this.stderr + chunk).slice(-8000); });
    this.exited = new Promise((resolve) => {
      this.proc.on('exit', (code, signal) => resolve({ code, signal }));
    });
    return new Promise((resolve, reject) => {
      const lines = readline.createInterface({ input: this.proc.stdout });
      let settled = false;
      const fail = (why) => {
        settled = true;
        clearTimeout(timer);
        this.proc.kill('SIGKILL');
        reject(new Error(`gemmserve ${this.flags.join(' ')}: ${why}; stderr:\n${this.stderr}`));
      };
      const timer = setTimeout(() => fail(`no ready line within ${timeoutMs} ms`), timeoutMs);
      let first = true;
      // Every line is read, and those after the ready ones dropped, so the pipe never fills.
      lines.on('line', (line) => {
        if (settled) return;
        if (first) {
          first = false;
          const match = READY_LINE.exec(line);
          if (!match) return fail(`unexpected first stdout line '${line}'`);
          this.address = `127.0.0.1:${match[1]}`;
        } else {
          const match = HTTP_LINE.exec(line);
          if (!match) return undefined; // the metrics port
          this.httpUrl = `http://127.0.0.1:${match[1]}`;
        }
        if (this.expectHttp && !this.httpUrl) return undefined;
        settled = true;
        clearTimeout(timer);
        return resolve(this);
      });
      this.exited.then(({ code, signal }) => {
        if (!settled) fail(`exited (code ${code}, signal ${signal}) before it was ready`);
      });
    });
  }

  // SIGTERM; resolves to the exit code (0 for a clean shutdown).
  async stop() {
    if (!this.proc) return null;
    this.proc.kill('SIGTERM');
    const { code, signal } = await this.exited;
    return signal ? `signal ${signal}` : code;
  }
}

module.exports = { ServerProcess };
