#!/usr/bin/env bash
# Fetches the source of the installed Abseil into DIR (Debian's `abseil`
# source package, the version libabsl-dev has, from the archive apt already
# uses) and prints the path of its tree. The TSan tree compiles Abseil's locks
# from it (cmake/ThreadSanitizer.cmake). Nothing is fetched when DIR holds it.
#
#   tests/tsan_absl_source.sh DIR
#
# apt's own lists and sources are left alone: a deb-src copy of the machine's
# Debian sources, apt's lists and its downloads all live in DIR.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: tests/tsan_absl_source.sh DIR" >&2
  exit 2
fi
dir=$(realpath -m "$1")
version=$(dpkg-query -W -f='${Version}' libabsl-dev 2>/dev/null) || {
  echo "tsan_absl_source: libabsl-dev is not installed (scripts/install_deps.sh)" >&2
  exit 1
}
upstream=${version%-*}   # 20220623.1-1+deb12u2 -> 20220623.1
tree="$dir/abseil-$upstream"
if [[ -f "$tree/.gemmserve-version" && "$(cat "$tree/.gemmserve-version")" == "$version" ]]; then
  echo "$tree"
  exit 0
fi

# Only a directory this script made (or an empty or missing one) is replaced.
if [[ -d "$dir" && -n "$(ls -A "$dir")" && ! -f "$dir/sources.list" ]]; then
  echo "tsan_absl_source: $dir is not empty and not one this script made" >&2
  exit 1
fi
rm -rf "$dir"
mkdir -p "$dir/lists/partial" "$dir/archives/partial" "$dir/cache" "$dir/sources.list.d"
# The machine's Debian sources as deb-src: one-line lists and deb822 files.
sed -n 's/^deb \(.*debian.*\)$/deb-src \1/p' /etc/apt/sources.list >"$dir/sources.list" 2>/dev/null || true
for file in /etc/apt/sources.list.d/*.sources; do
  [[ -e "$file" ]] && grep -q 'debian' "$file" || continue
  sed 's/^Types: *deb$/Types: deb-src/' "$file" >"$dir/sources.list.d/$(basename "$file")"
done
for file in /etc/apt/sources.list.d/*.list; do
  [[ -e "$file" ]] || continue
  sed -n 's/^deb \(.*debian.*\)$/deb-src \1/p' "$file" >>"$dir/sources.list"
done
if ! grep -qs '^deb-src\|^Types: deb-src' "$dir/sources.list" "$dir"/sources.list.d/*; then
  echo "tsan_absl_source: no Debian archive found in /etc/apt/sources.list{,.d}" >&2
  exit 1
fi
apt_options=(-o "Dir::Etc::sourcelist=$dir/sources.list" -o "Dir::Etc::sourceparts=$dir/sources.list.d"
             -o "Dir::State::lists=$dir/lists" -o "Dir::Cache=$dir/cache"
             -o "Dir::Cache::archives=$dir/archives"
             -o APT::Sandbox::User=root -q)
apt-get "${apt_options[@]}" update >&2
# The installed version's source; where the archive has moved on to another
# Debian revision of the same upstream version, that one (the same code but
# for Debian's patches, which apt-get source applies).
cd "$dir"
if ! apt-get "${apt_options[@]}" source "abseil=$version" >&2; then
  echo "tsan_absl_source: abseil $version is not in the archive; taking its current" \
       "source of $upstream" >&2
  apt-get "${apt_options[@]}" source abseil >&2
fi
if [[ ! -f "$tree/absl/synchronization/mutex.cc" ]]; then
  echo "tsan_absl_source: no $tree/absl/synchronization/mutex.cc after apt-get source" \
       "(the archive's abseil is not upstream $upstream)" >&2
  exit 1
fi
echo "$version" >"$tree/.gemmserve-version"
echo "$tree"
