#include "tools/torch_formats/pickle_reader.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_format.h"
#include "autograd/base/error.h"

namespace ddpkit::torch_formats {
namespace {

using nlohmann::json;

// A value on the pickle stack, with what bounds it: how deep it nests and how many values it
// holds (copying it from the memo costs that much of the budget).
struct Item {
  json value;
  int depth = 0;
  int64_t weight = 1;
};

// Opcodes by their byte (pickletools' names).
enum Op : uint8_t {
  kMark = '(',
  kStop = '.',
  kBinInt = 'J',
  kBinInt1 = 'K',
  kBinInt2 = 'M',
  kNone = 'N',
  kBinFloat = 'G',
  kBinUnicode = 'X',
  kAppend = 'a',
  kAppends = 'e',
  kBinGet = 'h',
  kLongBinGet = 'j',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kSetItem = 's',
  kSetItems = 'u',
  kTuple = 't',
  kEmptyTuple = ')',
  kEmptyList = ']',
  kEmptyDict = '}',
  kProto = 0x80,
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kLong1 = 0x8a,
};

// The names of opcodes a dump never holds, for the refusal.
std::string_view ForeignName(uint8_t op) {
  switch (op) {
    case 'c': return "GLOBAL";
    case 0x93: return "STACK_GLOBAL";
    case 'R': return "REDUCE";
    case 'b': return "BUILD";
    case 0x81: return "NEWOBJ";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES";
    case 0x8c: return "SHORT_BINUNICODE";
    case 0x95: return "FRAME";
    case 0x94: return "MEMOIZE";
    case 'I': return "INT";
    case 'L': return "LONG";
    case 'F': return "FLOAT";
    case 'V': return "UNICODE";
    case 'S': return "STRING";
    case 'd': return "DICT";
    case 'l': return "LIST";
    case 'p': return "PUT";
    case 'g': return "GET";
    case '0': return "POP";
    case '1': return "POP_MARK";
    case '2': return "DUP";
    default: return "";
  }
}

// UTF-8 as a JSON string must be: no overlong forms, no surrogates, nothing past U+10FFFF.
bool ValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;  // continuation bytes
    uint32_t cp = c;
    if (c >= 0xc2 && c <= 0xdf) {
      n = 1, cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 2, cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3, cp = c & 0x07;
    } else if (c >= 0x80) {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

class Reader {
 public:
  explicit Reader(std::string_view bytes)
      : bytes_(bytes), budget_(8 * static_cast<int64_t>(bytes.size()) + (1 << 20)) {}

  absl::StatusOr<json> Read() {
    while (pos_ < bytes_.size()) {
      at_ = pos_;
      op_ = static_cast<uint8_t>(bytes_[pos_++]);
      if (op_ == kStop) return Finish();
      DDPKIT_RETURN_IF_ERROR(Step());
    }
    return Fail("ends without STOP (truncated?)");
  }

 private:
  absl::Status Fail(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pickle: %s at offset %d", absl::string_view(what.data(), what.size()), at_));
  }

  absl::StatusOr<json> Finish() {
    if (stack_.size() != 1 || !marks_.empty()) return Fail("STOP with an unbalanced stack");
    return std::move(stack_[0].value);
  }

  absl::Status Step() {
    switch (op_) {
      case kProto: return Proto();
      case kMark: return Mark();
      case kEmptyDict: return Push({json::object(), 1, 1});
      case kEmptyList: return Push({json::array(), 1, 1});
      case kEmptyTuple: return Push({json::array(), 1, 1});
      case kNone: return Push({json(nullptr)});
      case kNewTrue: return Push({json(true)});
      case kNewFalse: return Push({json(false)});
      case kBinInt1: return Unsigned(1);
      case kBinInt2: return Unsigned(2);
      case kBinInt: return Signed(4);
      case kLong1: return Long1();
      case kBinFloat: return Float();
      case kBinUnicode: return Unicode();
      case kBinPut: return Put(1);
      case kLongBinPut: return Put(4);
      case kBinGet: return Get(1);
      case kLongBinGet: return Get(4);
      case kAppend: return Append(1);
      case kAppends: return Append(-1);
      case kSetItem: return SetItems(2);
      case kSetItems: return SetItems(-1);
      case kTuple: return Tuple(-1);
      case kTuple1: return Tuple(1);
      case kTuple2: return Tuple(2);
      case kTuple3: return Tuple(3);
      default: return Foreign();
    }
  }

  absl::Status Foreign() const {
    const std::string_view name = ForeignName(op_);
    return Fail(absl::StrFormat(
        "opcode 0x%02x%s is not one PyTorch's flight-recorder dumps use (they hold only "
        "dictionaries, lists, tuples, strings, numbers, booleans and None)",
        op_, name.empty() ? "" : StrCat(" (", name, ")")));
  }

  // The next n bytes of the argument of the opcode being read.
  absl::StatusOr<std::string_view> Take(size_t n) {
    if (bytes_.size() - pos_ < n) {
      return Fail(absl::StrFormat("opcode 0x%02x needs %d byte(s), %d left (truncated?)", op_, n,
                                  bytes_.size() - pos_));
    }
    std::string_view out = bytes_.substr(pos_, n);
    pos_ += n;
    return out;
  }

  // A little-endian unsigned integer of n bytes.
  absl::StatusOr<uint64_t> Le(size_t n) {
    DDPKIT_ASSIGN_OR_RETURN(std::string_view b, Take(n));
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;) v = (v << 8) | static_cast<unsigned char>(b[i]);
    return v;
  }

  absl::Status Proto() {
    DDPKIT_ASSIGN_OR_RETURN(uint64_t version, Le(1));
    if (version > 5) return Fail(absl::StrFormat("protocol %d is not a pickle protocol", version));
    return absl::OkStatus();
  }

  absl::Status Mark() {
    if (marks_.size() >= kMaxPickleDepth) return Fail("marks nest too deep");
    marks_.push_back(stack_.size());
    return absl::OkStatus();
  }

  absl::Status Unsigned(size_t n) {
    DDPKIT_ASSIGN_OR_RETURN(uint64_t v, Le(n));
    return Push({json(static_cast<int64_t>(v))});
  }

  absl::Status Signed(size_t n) {
    DDPKIT_ASSIGN_OR_RETURN(uint64_t v, Le(n));
    return Push({json(static_cast<int64_t>(static_cast<int32_t>(static_cast<uint32_t>(v))))});
  }

  // LONG1: a length byte, then that many bytes of a little-endian two's complement integer.
  absl::Status Long1() {
    DDPKIT_ASSIGN_OR_RETURN(uint64_t n, Le(1));
    if (n > 8) return Fail(absl::StrFormat("an integer of %d bytes (past 64 bits)", n));
    DDPKIT_ASSIGN_OR_RETURN(uint64_t v, Le(n));
    if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);  // sign
    return Push({json(static_cast<int64_t>(v))});
  }

  absl::Status Float() {
    DDPKIT_ASSIGN_OR_RETURN(std::string_view b, Take(8));
    uint64_t bits = 0;
    for (char c : b) bits = (bits << 8) | static_cast<unsigned char>(c);  // big-endian
    return Push({json(std::bit_cast<double>(bits))});
  }

  absl::Status Unicode() {
    DDPKIT_ASSIGN_OR_RETURN(uint64_t n, Le(4));
    DDPKIT_ASSIGN_OR_RETURN(std::string_view s, Take(n));
    if (!ValidUtf8(s)) return Fail("a string that is not UTF-8");
    return Push({json(std::string(s)), 0, 1 + static_cast<int64_t>(n) / 8});
  }

  // Copies, unlike Python's references: PyTorch's pickler memoizes a container once it is
  // complete, so a copy holds what a reference would.
  absl::Status Put(size_t n) {
    DDPKIT_ASSIGN_OR_RETURN(uint64_t key, Le(n));
    if (Top() == nullptr) return Fail("PUT on an empty stack");
    DDPKIT_RETURN_IF_ERROR(Spend(Top()->weight));
    memo_[key] = *Top();
    return absl::OkStatus();
  }

  absl::Status Get(size_t n) {
    DDPKIT_ASSIGN_OR_RETURN(uint64_t key, Le(n));
    auto it = memo_.find(key);
    if (it == memo_.end()) return Fail(absl::StrFormat("GET of memo %d, never PUT", key));
    DDPKIT_RETURN_IF_ERROR(Spend(it->second.weight));
    return Push(it->second);
  }

  absl::Status Spend(int64_t weight) {
    budget_ -= weight;
    if (budget_ < 0) return Fail("memo copies grow past a few times the input's size");
    return absl::OkStatus();
  }

  absl::Status Push(Item item) {
    stack_.push_back(std::move(item));
    return absl::OkStatus();
  }

  // The top of the stack above the innermost mark, or null.
  Item* Top() {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    return stack_.size() > floor ? &stack_.back() : nullptr;
  }

  // The last n items (n < 0: those above the innermost mark, which is dropped), oldest first.
  absl::StatusOr<std::vector<Item>> PopItems(int n) {
    size_t from;
    if (n < 0) {
      if (marks_.empty()) return Fail("no MARK to take items from");
      from = marks_.back();
      marks_.pop_back();
    } else {
      const size_t floor = marks_.empty() ? 0 : marks_.back();
      if (stack_.size() - floor < static_cast<size_t>(n)) return Fail("stack underflow");
      from = stack_.size() - n;
    }
    std::vector<Item> out(std::make_move_iterator(stack_.begin() + from),
                          std::make_move_iterator(stack_.end()));
    stack_.resize(from);
    return out;
  }

  // Adds `child` to the container `parent`'s bounds.
  absl::Status Adopt(Item& parent, const Item& child) {
    parent.depth = std::max(parent.depth, child.depth + 1);
    parent.weight += child.weight;
    if (parent.depth > kMaxPickleDepth) {
      return Fail(absl::StrFormat("values nest deeper than %d", kMaxPickleDepth));
    }
    return absl::OkStatus();
  }

  absl::Status Tuple(int n) {
    DDPKIT_ASSIGN_OR_RETURN(std::vector<Item> items, PopItems(n));
    Item tuple{json::array(), 1, 1};
    for (Item& item : items) {
      DDPKIT_RETURN_IF_ERROR(Adopt(tuple, item));
      tuple.value.push_back(std::move(item.value));
    }
    return Push(std::move(tuple));
  }

  absl::Status Append(int n) {
    DDPKIT_ASSIGN_OR_RETURN(std::vector<Item> items, PopItems(n));
    Item* list = Top();
    if (list == nullptr || !list->value.is_array()) return Fail("APPEND to something not a list");
    for (Item& item : items) {
      DDPKIT_RETURN_IF_ERROR(Adopt(*list, item));
      list->value.push_back(std::move(item.value));
    }
    return absl::OkStatus();
  }

  absl::Status SetItems(int n) {
    DDPKIT_ASSIGN_OR_RETURN(std::vector<Item> items, PopItems(n));
    Item* dict = Top();
    if (dict == nullptr || !dict->value.is_object()) return Fail("SETITEM on something not a dict");
    if (items.size() % 2 != 0) return Fail("SETITEMS with a key and no value");
    for (size_t i = 0; i < items.size(); i += 2) {
      const json& key = items[i].value;
      std::string name;
      if (key.is_string()) {
        name = key.get<std::string>();
      } else if (key.is_number_integer()) {
        name = key.dump();  // PyTorch 2.3's pg_config is keyed by the group's number
      } else {
        return Fail(StrCat("a dictionary key that is a ", key.type_name()));
      }
      DDPKIT_RETURN_IF_ERROR(Adopt(*dict, items[i + 1]));
      dict->value[name] = std::move(items[i + 1].value);
    }
    return absl::OkStatus();
  }

  std::string_view bytes_;
  size_t pos_ = 0;
  size_t at_ = 0;   // where the opcode being read starts
  uint8_t op_ = 0;  // the opcode being read
  int64_t budget_;  // the weight memo copies may still add
  std::vector<Item> stack_;
  std::vector<size_t> marks_;  // the stack's size at each open MARK
  std::unordered_map<uint64_t, Item> memo_;
};

}  // namespace

absl::StatusOr<json> ReadTorchPickle(std::string_view bytes) { return Reader(bytes).Read(); }

}  // namespace ddpkit::torch_formats
