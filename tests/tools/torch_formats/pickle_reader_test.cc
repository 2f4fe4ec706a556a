// The pickle subset of PyTorch's flight-recorder dumps (tools/torch_formats/pickle_reader.h): every
// opcode they use, what Python's pickle.loads makes of the same bytes (noted beside each), and
// the refusals: other opcodes, truncation, nesting and memo copies past their bounds.
#include "tools/torch_formats/pickle_reader.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "autograd/base/file_util.h"
#include "gtest/gtest.h"

namespace ddpkit::torch_formats {
namespace {

using nlohmann::json;

std::string Bytes(std::initializer_list<int> b) {
  std::string out;
  for (int c : b) out.push_back(static_cast<char>(c));
  return out;
}

json Read(const std::string& bytes) {
  absl::StatusOr<json> j = ReadTorchPickle(bytes);
  EXPECT_TRUE(j.ok()) << j.status();
  return j.ok() ? *j : json();
}

std::string Refusal(const std::string& bytes) {
  absl::StatusOr<json> j = ReadTorchPickle(bytes);
  EXPECT_FALSE(j.ok()) << j->dump();
  return j.ok() ? "" : std::string(j.status().message());
}

// pickle.dumps({"a": [1, -2, 300, 2**40, -(2**40)], "b": (None, True, False), "c": 0.5}, 2)
// as PyTorch's pickler writes it (BINUNICODE keys, MARK ... SETITEMS).
TEST(PickleReaderTest, ScalarsListsTuplesAndDicts) {
  const std::string bytes =
      Bytes({0x80, 2,   '}',  '(',  'X',  1,    0,    0,    0,    'a',  'q',  0,    ']', '(',
             'K',  1,   'J',  0xfe, 0xff, 0xff, 0xff, 'M',  0x2c, 0x01, 0x8a, 6,    0,   0,
             0,    0,   0,    1,    0x8a, 6,    0,    0,    0,    0,    0,    0xff, 'e', 'X',
             1,    0,   0,    0,    'b',  'N',  0x88, 0x89, 0x87, 'X',  1,    0,    0,   0,
             'c',  'G', 0x3f, 0xe0, 0,    0,    0,    0,    0,    0,    'u',  '.'});
  EXPECT_EQ(Read(bytes), json::parse(R"({"a": [1, -2, 300, 1099511627776, -1099511627776],
                                         "b": [null, true, false], "c": 0.5})"));
}

// PyTorch memoizes each string once and a shared dict (a stack frame) after it is complete.
TEST(PickleReaderTest, MemoGetsCopiesOfStringsAndFinishedDicts) {
  const std::string bytes =
      Bytes({0x80, 2, ']', '(', 'X', 2, 0, 0, 0,   'h', 'i', 'q', 7, '}', '(', 'h', 7,
             'K',  5, 'u', 'r', 0,   1, 0, 0, 'h', 7,   'j', 0,   1, 0,   0,   'e', '.'});
  EXPECT_EQ(Read(bytes), json::parse(R"(["hi", {"hi": 5}, "hi", {"hi": 5}])"));
}

// PyTorch 2.3's pg_config is keyed by the group's number; single SETITEM / APPEND; TUPLE.
TEST(PickleReaderTest, IntegerKeysBecomeTheirText) {
  const std::string bytes = Bytes({0x80, 2,   '}', 'K', 0,   ']', 'K', 3,   'a', 's', 'K', 1,
                                   ')',  's', 'K', 2,   '(', 'K', 4,   'K', 5,   't', 's', '.'});
  EXPECT_EQ(Read(bytes), json::parse(R"({"0": [3], "1": [], "2": [4, 5]})"));
}

TEST(PickleReaderTest, LongIntegersAreSignExtendedAndBoundedAt64Bits) {
  EXPECT_EQ(Read(Bytes({0x80, 2, 0x8a, 1, 0xff, '.'})), json(-1));
  EXPECT_EQ(Read(Bytes({0x80, 2, 0x8a, 2, 0x00, 0x80, '.'})), json(-32768));
  EXPECT_EQ(Read(Bytes({0x80, 2, 0x8a, 0, '.'})), json(0));
  EXPECT_EQ(Read(Bytes({0x80, 2, 0x8a, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '.'})),
            json(INT64_MAX));
  EXPECT_TRUE(absl::StrContains(Refusal(Bytes({0x80, 2, 0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0, 1, '.'})),
                                "an integer of 9 bytes (past 64 bits) at offset 2"));
}

TEST(PickleReaderTest, OtherOpcodesAreRefusedByOffsetAndName) {
  // pickle.dumps(os.system, 2): a GLOBAL (what makes unpickling run code).
  EXPECT_EQ(Refusal(std::string("\x80\x02"
                                "cposix\nsystem\nq\x00.",
                                19)),
            "pickle: opcode 0x63 (GLOBAL) is not one PyTorch's flight-recorder dumps use (they "
            "hold only dictionaries, lists, tuples, strings, numbers, booleans and None) at "
            "offset 2");
  EXPECT_TRUE(absl::StrContains(Refusal(Bytes({0x80, 2, ']', 'R', '.'})),
                                "opcode 0x52 (REDUCE) is not one"));
  EXPECT_TRUE(absl::StrContains(Refusal(Bytes({0x80, 4, 0x95, 1, 0, 0, 0, 0, 0, 0, 0, 'N', '.'})),
                                "opcode 0x95 (FRAME) is not one"));
  EXPECT_TRUE(absl::StrContains(Refusal(Bytes({0x80, 2, 0xfe, '.'})),
                                "opcode 0xfe is not one PyTorch's flight-recorder dumps use"));
}

TEST(PickleReaderTest, MalformedStreamsAreRefused) {
  EXPECT_EQ(Refusal(Bytes({0x80, 2, 'X', 9, 0, 0, 0, 'a'})),
            "pickle: opcode 0x58 needs 9 byte(s), 1 left (truncated?) at offset 2");
  EXPECT_EQ(Refusal(Bytes({0x80, 2, 'N'})), "pickle: ends without STOP (truncated?) at offset 2");
  EXPECT_EQ(Refusal(Bytes({0x80, 2, 'N', 'N', '.'})),
            "pickle: STOP with an unbalanced stack at offset 4");
  EXPECT_EQ(Refusal(Bytes({0x80, 2, 'h', 3, '.'})), "pickle: GET of memo 3, never PUT at offset 2");
  EXPECT_EQ(Refusal(Bytes({0x80, 2, 'e', '.'})), "pickle: no MARK to take items from at offset 2");
  EXPECT_EQ(Refusal(Bytes({0x80, 2, 'N', '(', 0x85, '.'})), "pickle: stack underflow at offset 4");
  EXPECT_EQ(Refusal(Bytes({0x80, 2, 'N', 'N', 'a', '.'})),
            "pickle: APPEND to something not a list at offset 4");
  EXPECT_EQ(Refusal(Bytes({0x80, 2, '}', ']', 'N', 's', '.'})),
            "pickle: a dictionary key that is a array at offset 5");
  EXPECT_EQ(Refusal(Bytes({0x80, 2, '}', '(', 'K', 1, 'u', '.'})),
            "pickle: SETITEMS with a key and no value at offset 6");
  EXPECT_EQ(Refusal(Bytes({0x80, 9, 'N', '.'})),
            "pickle: protocol 9 is not a pickle protocol at offset 0");
  EXPECT_EQ(Refusal(Bytes({0x80, 2, 'X', 2, 0, 0, 0, 0xc3, 0x28, '.'})),
            "pickle: a string that is not UTF-8 at offset 2");
  EXPECT_EQ(Refusal(Bytes({0x80, 2, 'X', 3, 0, 0, 0, 0xed, 0xa0, 0x80, '.'})),  // a surrogate
            "pickle: a string that is not UTF-8 at offset 2");
  EXPECT_EQ(Read(Bytes({0x80, 2, 'X', 4, 0, 0, 0, 0xf0, 0x9f, 0x99, 0x82, '.'})), json("🙂"));
}

TEST(PickleReaderTest, NestingIsBounded) {
  std::string deep = Bytes({0x80, 2, 'N'});
  for (int i = 0; i < kMaxPickleDepth; ++i) deep.push_back(static_cast<char>(0x85));  // TUPLE1
  deep.push_back('.');
  EXPECT_TRUE(Read(deep).is_array());
  deep.insert(deep.size() - 1, 1, static_cast<char>(0x85));
  EXPECT_TRUE(absl::StrContains(Refusal(deep), "values nest deeper than 32 at offset 35"));
  std::string marks = Bytes({0x80, 2});
  marks.append(kMaxPickleDepth + 1, '(');
  EXPECT_TRUE(absl::StrContains(Refusal(marks + "."), "marks nest too deep at offset 34"));
}

// A list of 1000 items PUT once and fetched 10,000 times would be 10 million values: refused.
TEST(PickleReaderTest, MemoCopiesAreBoundedByTheInputsSize) {
  std::string bomb = Bytes({0x80, 2, ']', '('});
  for (int i = 0; i < 1000; ++i) bomb += Bytes({'K', 1});
  bomb += Bytes({'e', 'q', 0, '(', 'N'});
  for (int i = 0; i < 10000; ++i) bomb += Bytes({'h', 0});
  bomb += Bytes({'t', '.'});
  EXPECT_TRUE(
      absl::StrContains(Refusal(bomb), "memo copies grow past a few times the input's size"))
      << Refusal(bomb);
}

// Every pickle dump of the fixtures is read, and says what its JSON twin says.
TEST(PickleReaderTest, EveryFixtureReadsAsItsJsonTwin) {
  int twins = 0, pickles = 0;
  for (const auto& file : std::filesystem::recursive_directory_iterator(
           std::string(DDPKIT_TESTDATA_DIR) + "/torch_fr")) {
    if (file.path().parent_path().filename() != "pickle") continue;
    absl::StatusOr<std::string> bytes = ReadFileToString(file.path().string());
    ASSERT_TRUE(bytes.ok());
    const json j = Read(*bytes);
    ++pickles;
    ASSERT_TRUE(j.is_object() && j.contains("version")) << file.path();
    const std::string twin = file.path().parent_path().parent_path().string() + "/json/" +
                             file.path().filename().string() + ".json";
    if (!std::filesystem::exists(twin)) continue;
    json text = json::parse(*ReadFileToString(twin));
    json from_pickle = j;
    // The JSON form has no stacks, writes what the pickle leaves None as 0 and pg_status's
    // numbers as text, and keeps an empty nccl_comm_state that the pickle leaves out (2.5's
    // leaves out empty entries instead).
    for (json* d : {&from_pickle, &text}) {
      d->erase("pg_status");
      for (const char* key : {"nccl_comm_state", "entries"}) {
        if (d->contains(key) && (*d)[key].empty()) d->erase(key);
      }
    }
    if (from_pickle.contains("entries")) {
      for (json& e : from_pickle["entries"]) {
        e.erase("frames");
        for (const char* t : {"time_discovered_started_ns", "time_discovered_completed_ns"}) {
          if (e[t].is_null()) e[t] = 0;
        }
      }
    }
    EXPECT_EQ(from_pickle.dump(), text.dump()) << file.path();
    ++twins;
  }
  EXPECT_EQ(pickles, 3 * (4 + 4 + 1 + 4 + 4));  // 2.3, 2.4, 2.5, 2.8, 2.15
  EXPECT_EQ(twins, 3 * (1 + 4 + 4));
}

}  // namespace
}  // namespace ddpkit::torch_formats
