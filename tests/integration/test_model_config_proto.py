"""proto/model_config.proto holds all of Triton's inference.ModelConfig, field for field.

Both files are compiled by protoc (Debian's protobuf-compiler) into FileDescriptorSets:
Triton's, vendored unchanged in tests/third_party/tritonclient/protos, and ours. Every
message and enum reachable from inference.ModelConfig in Triton's must exist in ours with
the same fields (name, number, type, label, type_name, oneof) and enum values, and ours
must declare nothing in those messages that Triton's lacks. A config.pbtxt written for
Triton then parses into our ModelConfig, whatever Triton field it uses, and the server can
accept or refuse each such field by name. No server is started."""
import os
import shutil
import subprocess
import tempfile
import unittest

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OURS = os.path.join(ROOT, "proto", "model_config.proto")
TRITON = os.path.join(ROOT, "tests", "third_party", "tritonclient", "protos", "model_config.proto")
ROOT_MESSAGE = ".inference.ModelConfig"

# A config.pbtxt that sets every top-level field Triton has and we did not use to declare.
TRITON_ONLY_CONFIG = """
name: "m"
backend: "onnxruntime"
max_batch_size: 8
batch_input { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "acc" data_type: TYPE_FP32
              source_input: "x" }
batch_output { target_name: "y" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "x" }
optimization {
  graph { level: 1 }
  priority: PRIORITY_MAX
  cuda { graphs: true graph_spec { batch_size: 4 input { key: "x" value { dim: [4, 2] } }
                                   graph_lower_bound { batch_size: 1 } } }
  execution_accelerators { cpu_execution_accelerator { name: "openvino"
                                                       parameters { key: "k" value: "v" } } }
  input_pinned_memory { enable: false }
  gather_kernel_buffer_threshold: 2
  eager_batching: true
}
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  oldest { max_candidate_sequences: 4 preferred_batch_size: [2, 4] }
  control_input { name: "START" control { kind: CONTROL_SEQUENCE_START
                                          int32_false_true: [0, 1] } }
  state { input_name: "in" output_name: "out" data_type: TYPE_FP32 dims: [-1]
          initial_state { name: "zero" data_type: TYPE_FP32 dims: [1] zero_data: true } }
}
cc_model_filenames { key: "8.0" value: "model_a100.plan" }
metric_tags { key: "team" value: "a" }
model_operations { op_library_filename: "libops.so" }
model_repository_agents { agents { name: "checksum" parameters { key: "MD5:model.onnx"
                                                                  value: "0" } } }
response_cache { enable: true }
model_metrics { metric_control { metric_identifier { family: "nv_inference_first_response_histogram_ms" }
                                 histogram_options { buckets: [1, 10, 100] } } }
"""


def compile_descriptor_set(path):
    """protoc --descriptor_set_out --include_imports on `path`, alone in a temp dir."""
    protoc = shutil.which("protoc")
    if protoc is None:
        raise AssertionError("protoc not found on PATH: run scripts/install_deps.sh "
                             "(it installs Debian's protobuf-compiler)")
    with tempfile.TemporaryDirectory(prefix="model-config-proto-") as tmp:
        shutil.copy(path, os.path.join(tmp, "model_config.proto"))
        out = os.path.join(tmp, "set.pb")
        result = subprocess.run(
            [protoc, "-I", tmp, "--include_imports", "--descriptor_set_out=" + out,
             os.path.join(tmp, "model_config.proto")],
            capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise AssertionError(f"protoc failed on {path}:\n{result.stderr}")
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
    return fds


def index(fds):
    """Fully qualified name (".inference.X.Y") -> DescriptorProto / EnumDescriptorProto."""
    messages, enums = {}, {}

    def walk(prefix, message):
        name = f"{prefix}.{message.name}"
        messages[name] = message
        for nested in message.nested_type:
            walk(name, nested)
        for enum in message.enum_type:
            enums[f"{name}.{enum.name}"] = enum

    for f in fds.file:
        prefix = "." + f.package if f.package else ""
        for message in f.message_type:
            walk(prefix, message)
        for enum in f.enum_type:
            enums[f"{prefix}.{enum.name}"] = enum
    return messages, enums


def reachable(messages, root):
    """Message and enum names reachable from `root` through field types."""
    seen_messages, seen_enums, todo = set(), set(), [root]
    while todo:
        name = todo.pop()
        if name in seen_messages:
            continue
        seen_messages.add(name)
        for field in messages[name].field:
            if field.type == descriptor_pb2.FieldDescriptorProto.TYPE_ENUM:
                seen_enums.add(field.type_name)
            elif field.type in (descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                                descriptor_pb2.FieldDescriptorProto.TYPE_GROUP):
                todo.append(field.type_name)
    return seen_messages, seen_enums


def field_signature(message, field):
    oneof = (message.oneof_decl[field.oneof_index].name
             if field.HasField("oneof_index") else None)
    return {"number": field.number,
            "type": descriptor_pb2.FieldDescriptorProto.Type.Name(field.type),
            "label": descriptor_pb2.FieldDescriptorProto.Label.Name(field.label),
            "type_name": field.type_name, "oneof": oneof,
            "proto3_optional": field.proto3_optional}


def message_signature(message):
    return {"fields": {f.name: field_signature(message, f) for f in message.field},
            "oneofs": sorted(o.name for o in message.oneof_decl),
            "map_entry": message.options.map_entry}


class ModelConfigProtoTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.triton = compile_descriptor_set(TRITON)
        cls.ours = compile_descriptor_set(OURS)
        cls.triton_messages, cls.triton_enums = index(cls.triton)
        cls.our_messages, cls.our_enums = index(cls.ours)
        cls.messages, cls.enums = reachable(cls.triton_messages, ROOT_MESSAGE)

    def test_same_package_and_syntax(self):
        ours = [f for f in self.ours.file if f.name == "model_config.proto"][0]
        triton = [f for f in self.triton.file if f.name == "model_config.proto"][0]
        self.assertEqual(ours.package, "inference")
        self.assertEqual((ours.package, ours.syntax), (triton.package, triton.syntax))

    def test_reachable_set_is_not_trivial(self):
        # Guards the walk itself: Triton's ModelConfig reaches dozens of messages.
        for name in (".inference.ModelSequenceBatching.State",
                     ".inference.ModelOptimizationPolicy.Cuda.GraphSpec.LowerBound",
                     ".inference.ModelMetrics.MetricControl.HistogramOptions",
                     ".inference.ModelConfig.CcModelFilenamesEntry"):
            self.assertIn(name, self.messages)
        self.assertIn(".inference.BatchInput.Kind", self.enums)

    def test_every_reachable_message_has_the_same_fields(self):
        for name in sorted(self.messages):
            with self.subTest(message=name):
                if name not in self.our_messages:
                    self.fail(f"{name} of Triton's ModelConfig is missing from proto/model_config.proto")
                triton = message_signature(self.triton_messages[name])
                ours = message_signature(self.our_messages[name])
                missing = sorted(set(triton["fields"]) - set(ours["fields"]))
                extra = sorted(set(ours["fields"]) - set(triton["fields"]))
                self.assertEqual(missing, [], f"{name}: Triton fields we lack")
                self.assertEqual(extra, [], f"{name}: fields Triton does not have")
                for field in sorted(triton["fields"]):
                    self.assertEqual(ours["fields"][field], triton["fields"][field],
                                     f"{name}.{field} differs from Triton's")
                self.assertEqual(ours["oneofs"], triton["oneofs"], f"{name}: oneofs")
                self.assertEqual(ours["map_entry"], triton["map_entry"], f"{name}: map entry")

    def test_reachable_messages_declare_the_same_nested_types(self):
        # Nothing in those messages that Triton lacks, used by a field or not.
        for name in sorted(self.messages):
            with self.subTest(message=name):
                triton, ours = self.triton_messages[name], self.our_messages.get(name)
                if ours is None:
                    continue  # reported by test_every_reachable_message_has_the_same_fields
                self.assertEqual(sorted(m.name for m in ours.nested_type),
                                 sorted(m.name for m in triton.nested_type),
                                 f"{name}: nested messages")
                self.assertEqual(sorted(e.name for e in ours.enum_type),
                                 sorted(e.name for e in triton.enum_type),
                                 f"{name}: nested enums")

    def test_every_reachable_enum_has_the_same_values(self):
        for name in sorted(self.enums):
            with self.subTest(enum=name):
                if name not in self.our_enums:
                    self.fail(f"{name} of Triton's ModelConfig is missing from proto/model_config.proto")
                triton = {v.name: v.number for v in self.triton_enums[name].value}
                ours = {v.name: v.number for v in self.our_enums[name].value}
                self.assertEqual(ours, triton, f"{name}: values")

    def test_scheduling_choice_holds_all_three_schedulers(self):
        config = self.our_messages[ROOT_MESSAGE]
        fields = message_signature(config)["fields"]
        self.assertEqual(
            {n: (f["number"], f["oneof"]) for n, f in fields.items()
             if f["oneof"] == "scheduling_choice"},
            {"dynamic_batching": (11, "scheduling_choice"),
             "sequence_batching": (13, "scheduling_choice"),
             "ensemble_scheduling": (15, "scheduling_choice")})

    def test_a_triton_config_pbtxt_parses_into_ours_and_round_trips_through_triton(self):
        ours_cls = self._message_class(self.ours)
        triton_cls = self._message_class(self.triton)
        config = text_format.Parse(TRITON_ONLY_CONFIG, ours_cls())
        self.assertTrue(config.response_cache.enable)
        self.assertEqual(config.WhichOneof("scheduling_choice"), "sequence_batching")
        # The same bytes mean the same thing to Triton's message.
        theirs = triton_cls.FromString(config.SerializeToString())
        self.assertEqual(text_format.MessageToString(theirs),
                         text_format.MessageToString(config))

    @staticmethod
    def _message_class(fds):
        pool = descriptor_pool.DescriptorPool()
        for f in fds.file:
            pool.Add(f)
        descriptor = pool.FindMessageTypeByName(ROOT_MESSAGE[1:])
        if hasattr(message_factory, "GetMessageClass"):
            return message_factory.GetMessageClass(descriptor)
        return message_factory.MessageFactory(pool).GetPrototype(descriptor)


if __name__ == "__main__":
    unittest.main()
