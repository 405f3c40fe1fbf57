#include "server/http/infer_json_parse.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "rapidjson/error/en.h"
#include "rapidjson/reader.h"
#include "server/common/allocation.h"
#include "server/common/client_text.h"
#include "server/common/status_macros.h"
#include "server/http/json_numbers.h"
#include "server/tensor/datatype.h"
#include "server/tensor/half.h"
#include "server/tensor/shape.h"

namespace gemmserve {
namespace {

// NaN and Infinity as Python's json and JavaScript write them; numbers reach
// the handler as text and are converted with std::from_chars (correctly
// rounded, to the input's own datatype).
constexpr unsigned kParseFlags =
    rapidjson::kParseIterativeFlag | rapidjson::kParseValidateEncodingFlag |
    rapidjson::kParseNumbersAsStringsFlag | rapidjson::kParseNanAndInfFlag;

std::string ShapeText(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

enum class Frame {
  kRoot,
  kRootParams,
  kInputs,
  kInput,
  kShape,
  kInputParams,
  kData,
  kOutputs,
  kOutput,
  kOutputParams,
};

// A RapidJSON SAX handler for the request's JSON header. It returns false to
// stop the parse at the first error, kept in `error`.
class InferHandler {
 public:
  InferHandler(HttpInferRequest* request, std::vector<InputState>* inputs, int pass,
               size_t header_length)
      : request_(request),
        inputs_(inputs),
        pass_(pass),
        // n numbers need at least 2n - 1 characters.
        max_numbers_(static_cast<int64_t>((header_length + 1) / 2)) {}

  absl::Status error;

  bool Null() { return Scalar(kNull, {}); }
  bool Bool(bool b) {
    bool_ = b;
    return Scalar(kBool, {});
  }
  bool Int(int) { return Unexpected(); }  // numbers come as text (kParseNumbersAsStringsFlag)
  bool Uint(unsigned) { return Unexpected(); }
  bool Int64(int64_t) { return Unexpected(); }
  bool Uint64(uint64_t) { return Unexpected(); }
  bool Double(double) { return Unexpected(); }
  bool RawNumber(const char* s, rapidjson::SizeType n, bool) {
    if (!Scalar(kNumber, absl::string_view(s, n))) return false;
    if (cursor_ != nullptr && stack_.back() == Frame::kData) return ScanDataNumbers();
    return true;
  }

  // The reader's stream position (its src_) and the end of the text: lets a
  // data array's numbers after the first be read here, without RapidJSON's
  // per-token state machine, number scanner and copy (ScanDataNumbers).
  void SetCursor(const char** cursor, const char* end) {
    cursor_ = cursor;
    end_ = end;
  }
  bool String(const char* s, rapidjson::SizeType n, bool) {
    return Scalar(kString, absl::string_view(s, n));
  }
  bool Key(const char* s, rapidjson::SizeType n, bool) {
    key_.assign(s, n);
    return true;
  }

  bool StartObject() {
    if (stack_.empty()) return Push(Frame::kRoot);
    switch (stack_.back()) {
      case Frame::kRoot:
        if (key_ == "parameters")
          return Once(&root_params_, "parameters") && Push(Frame::kRootParams);
        return Misplaced("an object");
      case Frame::kInputs:
        if (pass_ == 1) {
          if (static_cast<int64_t>(inputs_->size()) >= kMaxHttpInputs) {
            return Fail(absl::StrCat("the request has more than ", kMaxHttpInputs, " inputs"));
          }
          inputs_->emplace_back();
        }
        ++input_index_;
        return Push(Frame::kInput);
      case Frame::kInput:
        if (key_ == "parameters") {
          if (pass_ == 2) return Push(Frame::kInputParams);
          return Once(&Current().has_parameters, "parameters") && Push(Frame::kInputParams);
        }
        return Misplaced("an object");
      case Frame::kOutputs:
        if (pass_ == 1) {
          if (static_cast<int64_t>(request_->outputs.size()) >= kMaxHttpOutputs) {
            return Fail(
                absl::StrCat("the request asks for more than ", kMaxHttpOutputs, " outputs"));
          }
          request_->outputs.emplace_back();
          request_->outputs.back().binary = request_->binary_data_output;
          output_fields_ = 0;
        }
        return Push(Frame::kOutput);
      case Frame::kOutput:
        if (key_ == "parameters") return Push(Frame::kOutputParams);
        return Misplaced("an object");
      default: return Misplaced("an object");
    }
  }

  bool EndObject(rapidjson::SizeType) {
    const Frame frame = stack_.back();
    stack_.pop_back();
    if (frame == Frame::kInput && pass_ == 1 && !FinishInput(Current())) return false;
    return true;
  }

  bool StartArray() {
    if (stack_.empty()) return Fail("the request must be a JSON object");
    switch (stack_.back()) {
      case Frame::kRoot:
        if (key_ == "inputs") return Once(&root_inputs_, "inputs") && Push(Frame::kInputs);
        if (key_ == "outputs") return Once(&root_outputs_, "outputs") && Push(Frame::kOutputs);
        return Misplaced("an array");
      case Frame::kInput:
        if (key_ == "shape") {
          if (pass_ == 2) return Push(Frame::kShape);
          return Once(&Current().has_shape, "shape") && Push(Frame::kShape);
        }
        if (key_ == "data") {
          if (pass_ == 1 && !Once(&Current().has_data, "data")) return false;
          return StartData();
        }
        return Misplaced("an array");
      case Frame::kData: return OpenDataArray();
      default: return Misplaced("an array");
    }
  }

  bool EndArray(rapidjson::SizeType) {
    if (stack_.back() == Frame::kData) return CloseDataArray();
    stack_.pop_back();
    return true;
  }

 private:
  enum Kind { kNull, kBool, kString, kNumber };

  InputState& Current() { return (*inputs_)[input_index_]; }

  bool Fail(std::string message) {
    error = absl::InvalidArgumentError(std::move(message));
    return false;
  }
  bool Unexpected() { return Fail("unexpected number"); }
  bool Push(Frame f) {
    stack_.push_back(f);
    return true;
  }
  bool Once(bool* seen, const char* field) {
    if (*seen) return Fail(absl::StrCat("'", field, "' appears twice in ", Where()));
    *seen = true;
    return true;
  }
  std::string Where() {
    for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) {
      if (*it == Frame::kInput || *it == Frame::kShape || *it == Frame::kInputParams ||
          *it == Frame::kData) {
        const InputState& in = Current();
        return in.has_name ? absl::StrCat("input '", ClientText(in.name), "'")
                           : absl::StrCat("input ", input_index_);
      }
      if (*it == Frame::kOutput || *it == Frame::kOutputParams) return "a requested output";
    }
    return "the request";
  }
  bool Misplaced(const char* what) {
    if (stack_.back() == Frame::kRoot || stack_.back() == Frame::kInput ||
        stack_.back() == Frame::kOutput) {
      return Fail(absl::StrCat("unexpected ", what, " for '", ClientText(key_), "' in ", Where()));
    }
    return Fail(absl::StrCat("unexpected ", what, " in ", Where()));
  }
  static const char* KindName(Kind k) {
    switch (k) {
      case kNull: return "null";
      case kBool: return "a boolean";
      case kString: return "a string";
      case kNumber: return "a number";
    }
    return "a value";
  }
  bool WrongKind(Kind k, const char* expected) {
    return Fail(absl::StrCat("'", ClientText(key_), "' in ", Where(), ": expected ", expected,
                             ", got ", KindName(k)));
  }
  // shared_memory_region (a string), shared_memory_byte_size and
  // shared_memory_offset (non-negative integers), each at most once; other
  // keys are not ours.
  bool SharedMemoryField(Kind k, absl::string_view text, HttpSharedMemory* shm) {
    if (key_ == "shared_memory_region") {
      if (k != kString) return WrongKind(k, "a string");
      if (shm->region) return Fail(absl::StrCat("'", key_, "' appears twice in ", Where()));
      shm->region.emplace(text.data(), text.size());
      return true;
    }
    std::optional<uint64_t>* field = key_ == "shared_memory_byte_size" ? &shm->byte_size
                                     : key_ == "shared_memory_offset"  ? &shm->offset
                                                                       : nullptr;
    if (field == nullptr) return true;
    if (field->has_value()) return Fail(absl::StrCat("'", key_, "' appears twice in ", Where()));
    uint64_t v;
    if (!UnsignedParameter(k, text, &v)) return false;
    *field = v;
    return true;
  }

  bool UnsignedParameter(Kind k, absl::string_view text, uint64_t* out) {
    if (k == kNumber && ParseInteger(text, out)) return true;
    return Fail(absl::StrCat("parameter '", ClientText(key_),
                             "': expected a non-negative integer (int64 or uint64)"));
  }

  // A value that is not an array or object, read in the frame it is in.
  bool Scalar(Kind k, absl::string_view text) {
    if (stack_.empty()) return Fail("the request must be a JSON object");
    switch (stack_.back()) {
      case Frame::kRoot: return RootField(k, text);
      case Frame::kRootParams: return pass_ == 2 || RootParameter(k, text);
      case Frame::kInput: return InputField(k, text);
      case Frame::kShape: return pass_ == 2 || ShapeEntry(k, text);
      case Frame::kInputParams: return pass_ == 2 || InputParameter(k, text);
      case Frame::kData:
        if (k != kNumber) {
          return Fail(absl::StrCat("'data' of ", Where(), ": expected numbers, got ", KindName(k)));
        }
        return DataNumber(text);
      case Frame::kOutput: return pass_ == 2 || OutputField(k, text);
      case Frame::kOutputParams: return pass_ == 2 || OutputParameter(k, text);
      case Frame::kInputs:
      case Frame::kOutputs:
        return Fail(absl::StrCat("each entry of '",
                                 stack_.back() == Frame::kInputs ? "inputs" : "outputs",
                                 "' must be an object, got ", KindName(k)));
    }
    return Fail("unexpected value");
  }

  bool RootField(Kind k, absl::string_view text) {
    if (key_ == "id") {
      if (k != kString) return WrongKind(k, "a string");
      if (!Once(&root_id_, "id")) return false;
      if (pass_ == 1) request_->id.assign(text.data(), text.size());
      return true;
    }
    if (key_ == "inputs" || key_ == "outputs") return WrongKind(k, "an array");
    if (key_ == "parameters") return WrongKind(k, "an object");
    return Fail(absl::StrCat("unknown field '", ClientText(key_),
                             "' in the request; expected id, parameters, inputs, outputs"));
  }

  bool RootParameter(Kind k, absl::string_view text) {
    if (key_ == "priority") return UnsignedParameter(k, text, &request_->view.priority);
    if (key_ == "timeout") return UnsignedParameter(k, text, &request_->view.timeout_us);
    if (key_ == "binary_data_output") {
      if (k != kBool) return WrongKind(k, "a boolean");
      request_->binary_data_output = bool_;
      for (HttpRequestedOutput& o : request_->outputs) o.binary = o.binary || bool_;
    }
    return true;  // other parameters are not ours to read, as on gRPC
  }

  bool ShapeEntry(Kind k, absl::string_view text) {
    InputState& in = Current();
    int64_t d;
    if (k != kNumber || !ParseInteger(text, &d)) {
      return Fail(absl::StrCat("'shape' of ", Where(), ": expected integers"));
    }
    if (static_cast<int64_t>(in.shape.size()) >= kMaxRank) {
      return Fail(
          absl::StrCat("'shape' of ", Where(), ": rank exceeds the maximum rank ", kMaxRank));
    }
    in.shape.push_back(d);
    return true;
  }

  bool InputParameter(Kind k, absl::string_view text) {
    if (key_ == "binary_data_size") {
      uint64_t size;
      if (k != kNumber || !ParseInteger(text, &size) ||
          size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Fail(
            absl::StrCat("'binary_data_size' of ", Where(), ": expected a non-negative integer"));
      }
      Current().binary_size = static_cast<int64_t>(size);
      return true;
    }
    return SharedMemoryField(k, text, &Current().shm);
  }

  bool OutputField(Kind k, absl::string_view text) {
    if (key_ == "name") {
      if (k != kString) return WrongKind(k, "a string");
      if (output_fields_++ > 0) return Fail("'name' appears twice in a requested output");
      request_->outputs.back().name.assign(text.data(), text.size());
      return true;
    }
    if (key_ == "parameters") return WrongKind(k, "an object");
    return Fail(absl::StrCat("unknown field '", ClientText(key_),
                             "' in a requested output; expected name, parameters"));
  }

  bool OutputParameter(Kind k, absl::string_view text) {
    if (key_ == "binary_data") {
      if (k != kBool) return WrongKind(k, "a boolean");
      request_->outputs.back().binary = bool_;
      return true;
    }
    if (absl::Status refused = CheckOutputParameter(key_); !refused.ok()) {
      return Fail(std::string(refused.message()));
    }
    return SharedMemoryField(k, text, &request_->outputs.back().shm);
  }

  bool InputField(Kind k, absl::string_view text) {
    InputState& in = Current();
    if (key_ == "name" || key_ == "datatype") {
      if (k != kString) return WrongKind(k, "a string");
      if (pass_ == 2) return true;
      const bool is_name = key_ == "name";
      if (!Once(is_name ? &in.has_name : &in.has_datatype, is_name ? "name" : "datatype")) {
        return false;
      }
      (is_name ? in.name : in.datatype).assign(text.data(), text.size());
      return true;
    }
    if (key_ == "shape" || key_ == "data") return WrongKind(k, "an array");
    if (key_ == "parameters") return WrongKind(k, "an object");
    return Fail(absl::StrCat("unknown field '", ClientText(key_), "' in ", Where(),
                             "; expected name, shape, datatype, parameters, data"));
  }

  // --- data: numbers, flat or nested ---

  // The element count `shape` asks for, or -1 when the data cannot be
  // converted now (datatype or shape unknown or not valid).
  int64_t ConvertibleCount(const InputState& in, DataType* type) {
    if (!in.has_datatype || !in.has_shape) return -1;
    absl::StatusOr<DataType> t = ParseDataType(in.datatype);
    if (!t.ok()) return -1;  // the engine names the datatype error, as on gRPC
    *type = *t;
    int64_t count = 1;
    for (int64_t d : in.shape) {
      if (d < 0) return -1;
      if (d != 0 && count > max_numbers_ / d) {
        count = max_numbers_ + 1;  // more than the text can hold: counted, not stored
        break;
      }
      count *= d;
    }
    if (count > max_numbers_) return -1;
    return count;
  }

  bool StartData() {
    InputState& in = Current();
    depth_ = 0;
    max_depth_ = 0;
    leaf_depth_ = 0;
    child_count_.clear();
    numbers_ = 0;
    writing_ = nullptr;
    if (pass_ == 1) in.dims.clear();
    DataType type = DataType::kFP32;  // set by ConvertibleCount where count >= 0
    const int64_t count = ConvertibleCount(in, &type);
    const bool now = pass_ == 1 || in.deferred;
    if (count >= 0 && now && in.buffer == nullptr) {
      const absl::Status s = CatchAllocationFailure("the input's data", [&] {
        request_->json_data.emplace_back(static_cast<size_t>(count * DataTypeSize(type)));
        return absl::OkStatus();
      });
      if (!s.ok()) {
        error = s;
        return false;
      }
      in.buffer = &request_->json_data.back();
      in.deferred = false;
      writing_ = in.buffer->data();
      capacity_ = count;
      type_ = type;
      element_size_ = DataTypeSize(type);
    }
    stack_.push_back(Frame::kData);
    return OpenDataArray();
  }

  bool OpenDataArray() {
    if (depth_ > 0) ++child_count_[depth_ - 1];
    const int next = depth_ + 1;
    if (next > kMaxRank) {
      return Fail(absl::StrCat("'data' of ", Where(), " is nested deeper than the maximum rank ",
                               kMaxRank));
    }
    if (leaf_depth_ != 0 && next > leaf_depth_) {
      return Fail(absl::StrCat("'data' of ", Where(), " mixes numbers and arrays in one array"));
    }
    depth_ = next;
    if (depth_ > max_depth_) max_depth_ = depth_;
    if (static_cast<int>(child_count_.size()) < depth_) child_count_.push_back(0);
    child_count_[depth_ - 1] = 0;
    return true;
  }

  bool CloseDataArray() {
    const int64_t count = child_count_[depth_ - 1];
    if (pass_ == 1) {
      std::vector<int64_t>& dims = Current().dims;
      if (static_cast<int>(dims.size()) < depth_) {
        dims.resize(depth_, -1);
      }
      if (dims[depth_ - 1] < 0) {
        dims[depth_ - 1] = count;
      } else if (dims[depth_ - 1] != count) {
        return Fail(absl::StrCat("'data' of ", Where(), " is ragged: arrays at depth ", depth_,
                                 " hold ", dims[depth_ - 1], " and ", count, " values"));
      }
    }
    --depth_;
    if (depth_ == 0) {
      stack_.pop_back();
      if (pass_ == 1) Current().numbers = numbers_;
    }
    return true;
  }

  bool DataNumber(absl::string_view text) {
    ++child_count_[depth_ - 1];
    if (leaf_depth_ == 0) leaf_depth_ = depth_;
    if (depth_ != leaf_depth_ || max_depth_ != depth_) {
      return Fail(absl::StrCat("'data' of ", Where(), " mixes numbers and arrays in one array"));
    }
    if (writing_ != nullptr) {
      if (numbers_ >= capacity_) {
        return Fail(absl::StrCat("'data' of ", Where(), " has more than the ", capacity_,
                                 " elements of shape ", ShapeText(Current().shape)));
      }
      if (!ConvertNumber(type_, text, writing_ + numbers_ * element_size_)) {
        const bool range = LooksIntegral(text) || IsFloatingPoint(type_);
        return Fail(absl::StrCat("element ", numbers_, " of 'data' of ", Where(),
                                 range ? " is out of range for " : " is not an integer, as ",
                                 DataTypeName(type_), range ? "" : " needs"));
      }
    }
    ++numbers_;
    return true;
  }

  // Called with the reader just past a number of a data array (state: after
  // an element). Takes each following `, number` for which RapidJSON would
  // do exactly the same (a plain JSON number with at most 300 integer digits
  // and a two-digit exponent, so RapidJSON's "number too big" cannot apply,
  // followed by
  // whitespace, a comma or the bracket), hands it to DataNumber, and leaves
  // the stream after the last one taken: always after a complete element,
  // where the reader's state still holds. Anything else (NaN, a string, a
  // nested array, malformed text, the end of the text) is left to RapidJSON,
  // so what is accepted and every message stay as they were.
  bool ScanDataNumbers() {
    auto is_space = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
    auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
    const char* const end = end_;
    const char* p = *cursor_;
    while (true) {
      const char* q = p;
      while (q < end && is_space(*q)) ++q;
      if (q == end || *q != ',') break;
      ++q;
      while (q < end && is_space(*q)) ++q;
      const char* const start = q;
      if (q < end && *q == '-') ++q;
      if (q == end) break;
      if (*q == '0') {
        ++q;
      } else if (*q >= '1' && *q <= '9') {
        const char* const digits = q;
        while (q < end && is_digit(*q)) ++q;
        // RapidJSON refuses an integer part of about 309 digits or more
        // ("number too big"); those stay its own.
        if (q - digits > 300) break;
      } else {
        break;
      }
      if (q < end && *q == '.') {
        ++q;
        if (q == end || !is_digit(*q)) break;
        while (q < end && is_digit(*q)) ++q;
      }
      if (q < end && (*q == 'e' || *q == 'E')) {
        ++q;
        if (q < end && (*q == '+' || *q == '-')) ++q;
        const char* const digits = q;
        while (q < end && is_digit(*q)) ++q;
        if (q == digits || q - digits > 2) break;
      }
      if (q == end || !(is_space(*q) || *q == ',' || *q == ']')) break;
      if (!DataNumber(absl::string_view(start, static_cast<size_t>(q - start)))) {
        *cursor_ = p;
        return false;
      }
      p = q;
    }
    *cursor_ = p;
    return true;
  }

  // End of an input object in the first pass: the data's nesting against its
  // shape, and whether its numbers still need converting.
  bool FinishInput(InputState& in) {
    // The input's frame has ended: name it from what it held.
    const std::string where = in.has_name ? absl::StrCat("input '", ClientText(in.name), "'")
                                          : absl::StrCat("input ", input_index_);
    if (in.has_data && in.binary_size) {
      return Fail(absl::StrCat(where, " has both 'data' and binary_data_size; send it one way"));
    }
    if (in.shm.given()) {
      if (absl::Status s = SharedMemoryOf(in.shm.parameters(), where).status(); !s.ok()) {
        error = std::move(s);
        return false;
      }
      if (in.has_data || in.binary_size) {
        return Fail(absl::StrCat(where, " has ", in.has_data ? "'data'" : "binary_data_size",
                                 " and shared memory parameters; send its bytes one way"));
      }
    }
    if (!in.has_data) return true;
    if (in.buffer == nullptr) {
      DataType type;
      if (ConvertibleCount(in, &type) >= 0) in.deferred = true;
    }
    if (!in.has_shape) return true;  // the engine says what is missing
    bool shape_valid = true;
    for (int64_t d : in.shape) shape_valid = shape_valid && d >= 0;
    if (!shape_valid) return true;  // the engine names the bad dimension
    const absl::StatusOr<int64_t> expected = ElementCount(in.shape);
    if (!expected.ok()) return true;
    if (in.dims.size() > 1) {
      if (in.dims != in.shape) {
        return Fail(absl::StrCat("'data' of ", where, " is nested as ", ShapeText(in.dims),
                                 " but its shape is ", ShapeText(in.shape)));
      }
    } else if (in.numbers != *expected) {
      return Fail(absl::StrCat(where, ": expected ", *expected, " elements (shape ",
                               ShapeText(in.shape), ", ", ClientText(in.datatype), "), got ",
                               in.numbers, " in 'data'"));
    }
    return true;
  }

  HttpInferRequest* const request_;
  std::vector<InputState>* const inputs_;
  const int pass_;
  const int64_t max_numbers_;
  std::vector<Frame> stack_;
  std::string key_;
  bool bool_ = false;
  bool root_params_ = false, root_inputs_ = false, root_outputs_ = false, root_id_ = false;
  int output_fields_ = 0;
  int64_t input_index_ = -1;
  // The data being read.
  int depth_ = 0, max_depth_ = 0, leaf_depth_ = 0;
  std::vector<int64_t> child_count_;
  int64_t numbers_ = 0;
  uint8_t* writing_ = nullptr;
  int64_t capacity_ = 0;
  DataType type_ = DataType::kFP32;
  int64_t element_size_ = 0;
  const char** cursor_ = nullptr;  // SetCursor
  const char* end_ = nullptr;
};

}  // namespace

absl::Status ParseInferHeader(absl::string_view header, HttpInferRequest* request,
                              std::vector<InputState>* inputs, int pass, bool scan_numbers) {
  InferHandler handler(request, inputs, pass, header.size());
  rapidjson::Reader reader;
  // MemoryStream, not StringStream: RapidJSON 1.1 reads a StringStream
  // through a local copy that it writes back after each value, so only a
  // MemoryStream's position is the reader's own during a handler call, which
  // ScanDataNumbers relies on (json_scan_test and the fuzz target check the
  // two ways agree).
  rapidjson::MemoryStream stream(header.data(), header.size());
  static_assert(!rapidjson::StreamTraits<rapidjson::MemoryStream>::copyOptimization,
                "the reader must read the stream itself, not a copy");
  if (scan_numbers) handler.SetCursor(&stream.src_, header.data() + header.size());
  reader.Parse<kParseFlags>(stream, handler);
  if (!reader.HasParseError()) return absl::OkStatus();
  if (!handler.error.ok()) return handler.error;
  if (reader.GetParseErrorCode() == rapidjson::kParseErrorNumberTooBig) {
    // RapidJSON's own words ("too big to be stored in double") say nothing to
    // a client that sent an INT64 or UINT64 value.
    return absl::InvalidArgumentError(
        absl::StrCat("the number at byte ", reader.GetErrorOffset(),
                     " is out of range for every datatype (past 1.8e308)"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("malformed JSON at byte ", reader.GetErrorOffset(), ": ",
                   rapidjson::GetParseError_En(reader.GetParseErrorCode())));
}

}  // namespace gemmserve
