// `ddpkit launch` when things go wrong: no orphans when the launcher dies, restarts that resume
// from a checkpoint and lose nothing, and `ddpkit chaos` — signalled ranks end the job clearly,
// in time, with nothing left over.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "autograd/compute_threads.h"
#include "gtest/gtest.h"
#include "tests/run_command.h"

namespace {

using Result = ddpkit::testing_util::CommandResult;
const std::string kDdpkit = DDPKIT_BINARY_DIR "/bin/ddpkit";

Result RunShell(const std::string& command) {
  return ddpkit::testing_util::RunCommandMerged(command);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Alive and not a zombie (an orphan's zombie waits for a reaper, but holds no ports).
bool Alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && line[paren + 2] != 'Z';
}

TEST(LaunchTest, KillingTheLauncherEndsEveryRank) {
  const std::string dir = ::testing::TempDir() + "/orphans_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  // The ranks write their pids, then wait; the launcher is killed with SIGKILL (no handler).
  const std::string command = kDdpkit +
                              " launch --standalone --nproc-per-node 3 -- sh -c 'echo $$ > " + dir +
                              "/pid.$RANK; exec sleep 60' > /dev/null 2>&1 & echo $!";
  Result started = RunShell(command);
  const pid_t launcher = std::stoi(started.out);
  std::vector<pid_t> ranks;
  for (int attempt = 0; attempt < 200 && ranks.size() < 3; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ranks.clear();
    for (int r = 0; r < 3; ++r) {
      const std::string text = ReadFile(dir + "/pid." + std::to_string(r));
      if (!text.empty()) ranks.push_back(std::stoi(text));
    }
  }
  ASSERT_EQ(ranks.size(), 3u);
  ASSERT_EQ(::kill(launcher, SIGKILL), 0);
  for (pid_t pid : ranks) {
    for (int attempt = 0; attempt < 100 && Alive(pid); ++attempt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_FALSE(Alive(pid)) << "rank pid " << pid << " outlived its launcher";
  }
}

TEST(LaunchTest, MaxRestartsStartsEveryRankAgainUntilTheJobSucceeds) {
  // Rank 1 fails in the first run only; the ranks see which run they are in.
  const std::string flaky =
      " -- sh -c 'if [ $DDPKIT_RESTART_COUNT = 0 ] && [ $RANK = 1 ]; then exit 3; fi; "
      "echo run $DDPKIT_RESTART_COUNT'";
  Result r = RunShell(kDdpkit + " launch --standalone --nproc-per-node 2 --max-restarts 2" + flaky);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(
      absl::StrContains(r.out, "exited with code 3; restarting every rank (restart 1 of 2)"))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "[rank 0] run 1")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "[rank 1] run 1")) << r.out;

  r = RunShell(kDdpkit +
               " launch --standalone --nproc-per-node 2 --max-restarts 1 -- sh -c 'exit 4'");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "exited with code 4 (after 1 restart(s))")) << r.out;
  r = RunShell(kDdpkit + " launch --max-restarts -1 -- true");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "--max-restarts must be 0 or more")) << r.out;
}

// As torchrun: each rank's BLAS pool gets its share of the cores unless the user chose.
TEST(LaunchTest, EachRankGetsItsShareOfTheCoresUnlessTheUserChose) {
  const std::string show = " -- sh -c 'echo threads $OMP_NUM_THREADS'";
  const int share = std::max(1, ddpkit::AvailableCores() / 2);
  Result r = RunShell("env -u OMP_NUM_THREADS " + kDdpkit +
                      " launch --standalone --nproc-per-node 2" + show);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat("[rank 1] threads ", share))) << r.out;
  r = RunShell("OMP_NUM_THREADS=7 " + kDdpkit + " launch --standalone --nproc-per-node 2" + show);
  EXPECT_TRUE(absl::StrContains(r.out, "[rank 0] threads 7")) << r.out;
}

// The launcher tags every line a rank writes; the rank's own log lines then leave the rank out
// rather than say it twice ("[rank 0] ddpkit[rank 0] WARNING").
TEST(LaunchTest, ARanksWarningNamesItsRankOnce) {
  Result r = RunShell(kDdpkit + " launch --standalone --nproc-per-node 2 -- " + kDdpkit +
                      " train --backend gloo --steps 2 --batch-size 8 --find-unused-parameters");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "[rank 0] ddpkit WARNING find_unused_parameters is on"))
      << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "ddpkit[rank 0] WARNING")) << r.out;
}

// The whole story: a rank dies mid-training (after step 3), the launcher restarts every rank,
// they resume from the last checkpoint, and the job ends with exactly the weights of a run that
// was never interrupted.
TEST(LaunchTest, ARestartResumesFromTheCheckpointAndEndsBitwiseEqual) {
  const std::string dir = ::testing::TempDir() + "/restart_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string train = kDdpkit +
                            " train --backend gloo --model mlp:8,16,4 --batch-size 8 "
                            "--momentum 0.9 --timeout 20 ";
  Result whole = RunShell(kDdpkit + " launch --standalone --nproc-per-node 2 -- " + train +
                          "--steps 6 --save-weights " + dir + "/whole.safetensors");
  ASSERT_EQ(whole.status, 0) << whole.out;
  // First run: rank 1 trains 3 steps (every step checkpointed), then dies; rank 0 fails at its
  // 4th step. The restart runs both to step 6 from the step-3 checkpoint.
  const std::string run = train + "--checkpoint-dir " + dir + "/ckpt --checkpoint-every 1 " +
                          "--save-weights " + dir + "/restarted.safetensors --steps";
  const std::string script = "if [ $DDPKIT_RESTART_COUNT = 0 ] && [ $RANK = 1 ]; then " + run +
                             " 3 && exit 1; fi; exec " + run + " 6";
  Result restarted =
      RunShell(kDdpkit + " launch --standalone --nproc-per-node 2 --max-restarts 1 -- sh -c '" +
               script + "'");
  ASSERT_EQ(restarted.status, 0) << restarted.out;
  EXPECT_TRUE(absl::StrContains(restarted.out, "restarting every rank (restart 1 of 1)"))
      << restarted.out;
  EXPECT_TRUE(absl::StrContains(restarted.out, "step 3")) << restarted.out;
  const std::string a = ReadFile(dir + "/whole.safetensors");
  const std::string b = ReadFile(dir + "/restarted.safetensors");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "the restarted job's weights differ from the uninterrupted job's";
}

// `ddpkit launch` for node `node` of two, two ranks each, the second node on 127.0.0.2.
// A shell loop that waits, at most 60 s, until `condition` holds: a test kills a job once it has
// reached a point, not after a fixed time a loaded machine (a sanitizer's, CI's) may not reach it
// in.
std::string WaitUntil(const std::string& condition) {
  return absl::StrCat("for i in $(seq 600); do ", condition, " && break; sleep 0.1; done");
}

std::string NodeLauncher(int node, int port, const std::string& program) {
  return absl::StrCat("DDPKIT_STORE_TOKEN=two-nodes-", port, " ", kDdpkit,
                      " launch --nnodes 2 --nproc-per-node 2 --node-rank ", node,
                      " --master-addr 127.0.0.1 --master-port ", port, " --local-addr 127.0.0.",
                      node + 1, " -- ", program);
}

// Two launchers on one machine (loopback addresses 127.0.0.1 and 127.0.0.2) form one job of 4
// ranks, which trains exactly as 4 ranks on one node.
TEST(TwoNodesTest, TwoLaunchersFormOneJobThatEqualsTheSingleNodeRun) {
  const std::string dir = ::testing::TempDir() + "/two_nodes_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string train = kDdpkit +
                            " train --backend gloo --model mlp:8,16,4 --batch-size 8 --steps 5 "
                            "--timeout 30 --save-weights ";
  Result one = RunShell(kDdpkit + " launch --standalone --nproc-per-node 4 -- " + train + dir +
                        "/one_node.safetensors");
  ASSERT_EQ(one.status, 0) << one.out;
  const int port = ddpkit::testing_util::FreeLocalPort();
  Result two = RunShell("(" + NodeLauncher(1, port, train + dir + "/unused.safetensors") + " > " +
                        dir + "/node1.log 2>&1 &) ; " +
                        NodeLauncher(0, port, train + dir + "/two_nodes.safetensors"));
  ASSERT_EQ(two.status, 0) << two.out << ReadFile(dir + "/node1.log");
  EXPECT_TRUE(absl::StrContains(two.out, "world: 4 ranks (gloo)")) << two.out;
  const std::string a = ReadFile(dir + "/one_node.safetensors");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == ReadFile(dir + "/two_nodes.safetensors"));
}

// Killing one node's launcher (its ranks die with it) once the job trains ends the other node's
// job within the timeout + 5 s of the kill, with an error.
TEST(TwoNodesTest, KillingOneNodesLauncherEndsTheOtherWithinTheTimeout) {
  const int port = ddpkit::testing_util::FreeLocalPort();
  const std::string train = kDdpkit + " train --backend gloo --steps 10000000 --timeout 5";
  const std::string base = ::testing::TempDir() + "/node0_" + std::to_string(::getpid());
  const std::string log = base + ".log", killed = base + ".killed";
  std::filesystem::remove(killed);
  Result r = RunShell(
      "(" + NodeLauncher(1, port, train) + " > /dev/null 2>&1 & pid=$!; " +
      WaitUntil("grep -qF 'world: 4 ranks (gloo)' " + log + " 2>/dev/null") +
      "; kill -9 $pid; date +%s%N > " + killed + ") & " + NodeLauncher(0, port, train) + " > " +
      log + " 2>&1; status=$?; end=$(date +%s%N); echo status=$status ms=$(( (end - $(cat " +
      killed + ")) / 1000000 ))");
  const std::string node0 = ReadFile(log);
  EXPECT_TRUE(absl::StrContains(node0, "world: 4 ranks (gloo)")) << node0;  // it had started
  EXPECT_TRUE(absl::StrContains(node0, "ddpkit launch: job failed")) << node0;
  EXPECT_TRUE(absl::StrContains(r.out, "status=1")) << r.out;
  const size_t at = r.out.find("ms=");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_LT(std::stod(r.out.substr(at + 3)), 1000 * (5 + 5)) << r.out;  // the timeout, + 5 s
}

// Restart rounds shared by the nodes (tools/launch/restart_round.h): two launchers on one machine,
// two ranks each, a short teardown grace so each test takes a few seconds, and a node timeout
// of 5 s (heartbeats every second: none missed under a sanitizer's load), 3 s where a launcher
// is killed.
std::string RoundLauncher(int node, int port, int restarts, const std::string& worker,
                          int node_timeout, int nnodes = 2) {
  return absl::StrCat("DDPKIT_STORE_TOKEN=rounds-", port, " ", kDdpkit, " launch --nnodes ", nnodes,
                      " --nproc-per-node 2 --node-rank ", node,
                      " --master-addr 127.0.0.1 --master-port ", port, " --local-addr 127.0.0.",
                      node + 1, " --max-restarts ", restarts, " --node-timeout ", node_timeout,
                      " --teardown-grace 0.5 -- sh -c '", worker, "'");
}

struct TwoNodeRun {
  std::string node0, node1;  // each launcher's output
  int status0 = -1, status1 = -1;
  double seconds = 0;  // until both launchers had ended
};

// Both launchers, node 1 in the background; or, with `kill_node1_after`, node 1's launcher
// killed (SIGKILL) that many seconds after its two ranks have started (each touches
// $RUN_DIR/ran.$RANK) — and then `seconds` counts from the kill.
TwoNodeRun RunTwoNodes(const std::string& name, int restarts, const std::string& worker,
                       double kill_node1_after = 0) {
  const std::string dir = ::testing::TempDir() + "/" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const int port = ddpkit::testing_util::FreeLocalPort();
  const int node_timeout = kill_node1_after > 0 ? 3 : 5;
  const std::string node1 =
      RoundLauncher(1, port, restarts, worker, node_timeout) + " > " + dir + "/1.log 2>&1";
  const std::string background =
      kill_node1_after > 0
          ? absl::StrCat("(", node1, " & pid=$!; ",
                         WaitUntil("[ -e " + dir + "/ran.2 ] && [ -e " + dir + "/ran.3 ]"),
                         "; sleep ", kill_node1_after, "; kill -9 $pid; date +%s%N > ", dir,
                         "/killed) &")
          : absl::StrCat("{ ", node1, "; echo $? > ", dir, "/1.status; } &");
  Result r = RunShell("export RUN_DIR=" + dir + "; start=$(date +%s%N); " + background + " " +
                      RoundLauncher(0, port, restarts, worker, node_timeout) + " > " + dir +
                      "/0.log 2>&1; echo $? > " + dir + "/0.status; wait; [ ! -e " + dir +
                      "/killed ] || start=$(cat " + dir +
                      "/killed); echo ms=$(( ($(date +%s%N) - start) / 1000000 ))");
  TwoNodeRun run{ReadFile(dir + "/0.log"), ReadFile(dir + "/1.log")};
  const std::string s0 = ReadFile(dir + "/0.status"), s1 = ReadFile(dir + "/1.status");
  if (!s0.empty()) run.status0 = std::stoi(s0);
  if (!s1.empty()) run.status1 = std::stoi(s1);
  const size_t at = r.out.find("ms=");
  if (at != std::string::npos) run.seconds = std::stod(r.out.substr(at + 3)) / 1000;
  return run;
}

// The ranks of node 0 succeed at once, rank 3 on node 1 fails in the first round: node 0 does not
// end its job there, both nodes run round 1 (each round's ranks on a port of their own), and
// the job succeeds.
TEST(RestartRoundsTest, AFailureOnOneNodeRestartsEveryNodeAndTheJobSucceeds) {
  TwoNodeRun run =
      RunTwoNodes("rounds_ok", 1,
                  "if [ $DDPKIT_RESTART_COUNT = 0 ] && [ $RANK = 3 ]; then exit 3; fi; "
                  "echo run $DDPKIT_RESTART_COUNT port $MASTER_PORT");
  const std::string both = run.node0 + run.node1;
  EXPECT_EQ(run.status0, 0) << both;
  EXPECT_EQ(run.status1, 0) << both;
  for (const std::string& log : {run.node0, run.node1}) {
    EXPECT_TRUE(absl::StrContains(log, "node 1: rank 3 (pid ")) << both;
    EXPECT_TRUE(absl::StrContains(
        log,
        "exited with code 3; restarting every rank (restart 1 of 1), with every node in round 1"))
        << both;
  }
  EXPECT_TRUE(absl::StrContains(run.node0, "[rank 0] run 1 port")) << both;
  EXPECT_TRUE(absl::StrContains(run.node1, "[rank 3] run 1 port")) << both;
  // Round 1's ranks meet on another port than round 0's.
  const size_t first = run.node0.find("[rank 0] run 0 port "),
               second = run.node0.find("[rank 0] run 1 port ");
  ASSERT_NE(first, std::string::npos) << run.node0;
  ASSERT_NE(second, std::string::npos) << run.node0;
  EXPECT_NE(std::stoi(run.node0.substr(first + 20)), std::stoi(run.node0.substr(second + 20)))
      << run.node0;
}

// Rank 3 fails in every round: both launchers stop their ranks (node 0's would sleep 30 s) and
// fail after their one restart, naming the node and rank.
TEST(RestartRoundsTest, WhenRestartsRunOutEveryNodeFailsNamingTheNodeAndRank) {
  TwoNodeRun run = RunTwoNodes("rounds_out", 1, "if [ $RANK = 3 ]; then exit 5; fi; exec sleep 30");
  const std::string both = run.node0 + run.node1;
  EXPECT_EQ(run.status0, 1) << both;
  EXPECT_EQ(run.status1, 1) << both;
  EXPECT_LT(run.seconds, 10) << both;
  EXPECT_TRUE(absl::StrContains(run.node0, "the job failed on another node: node 1: rank 3 (pid "))
      << both;
  for (const std::string& log : {run.node0, run.node1}) {
    EXPECT_TRUE(absl::StrContains(log, "ddpkit launch: job failed: node 1: rank 3 (pid ")) << both;
    EXPECT_TRUE(absl::StrContains(log, "exited with code 5 (after 1 restart(s))")) << both;
  }
}

// Node 1's launcher is killed (its ranks die with it); node 0's ranks would sleep on. Node 0
// notices the missing heartbeat, stops its ranks, and ends when node 1 does not join round 1.
TEST(RestartRoundsTest, KillingANodesLauncherEndsNodeZeroWithAClearErrorInTime) {
  TwoNodeRun run = RunTwoNodes("rounds_killed", 1, "touch $RUN_DIR/ran.$RANK; exec sleep 30",
                               /*kill_node1_after=*/1);
  EXPECT_EQ(run.status0, 1) << run.node0;
  EXPECT_LT(run.seconds, 14) << run.node0;  // 6 s without a heartbeat, 0.5 s grace, 3 s join
  EXPECT_TRUE(absl::StrContains(run.node0, "node 1 of 2 did not join restart round 1 within 3 s"))
      << run.node0;
  EXPECT_TRUE(absl::StrContains(run.node0, "node 1: its launcher sent no heartbeat for 6 s"))
      << run.node0;
}

// Node 2 of 3 never comes. Node 0, whose deadline comes first, gives up on the job's start and
// says why; node 1, which joined, fails with that reason (node 2 named), not with node 0's store
// closing read as node 0 lost (a chaos trial's link cut at 0.01 s showed it).
TEST(RestartRoundsTest, ANodeThatNeverJoinsIsNamedByEveryNodeThatDid) {
  const std::string dir = ::testing::TempDir() + "/rounds_missing_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const int port = ddpkit::testing_util::FreeLocalPort();
  auto node = [&](int k) {
    return absl::StrCat(RoundLauncher(k, port, 0, "true", /*node_timeout=*/2, /*nnodes=*/3), " > ",
                        dir, "/", k, ".log 2>&1; echo $? > ", dir, "/", k, ".status");
  };
  RunShell("(sleep 0.5; " + node(1) + ") & " + node(0) + "; wait");
  const std::string node0 = ReadFile(dir + "/0.log"), node1 = ReadFile(dir + "/1.log");
  EXPECT_EQ(ReadFile(dir + "/0.status"), "1\n") << node0;
  EXPECT_EQ(ReadFile(dir + "/1.status"), "1\n") << node1;
  for (const std::string& log : {node0, node1}) {
    EXPECT_TRUE(
        absl::StrContains(log, "node 2 of 3 did not join the job's start (round 0) within 2 s"))
        << log;
    EXPECT_FALSE(absl::StrContains(log, "lost node 0's launcher")) << log;
  }
}

// As above, but node 1's launcher is stopped for 0.8 s from just before node 0 gives up (a
// loaded host): node 0 keeps its store up until node 1 has read why, not for a fixed two
// polls, so node 1 still names node 2 rather than reading the store's closing as node 0 lost.
TEST(RestartRoundsTest, ANodeThatReadsTheReasonLateStillGetsIt) {
  const std::string dir = ::testing::TempDir() + "/rounds_late_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const int port = ddpkit::testing_util::FreeLocalPort();
  auto launcher = [&](int k) {
    return RoundLauncher(k, port, 0, "true", /*node_timeout=*/2, /*nnodes=*/3);
  };
  const std::string pid = dir + "/1.pid";
  RunShell(absl::StrCat("(sleep 0.5; ", launcher(1), " > ", dir, "/1.log 2>&1 & echo $! > ", pid,
                        "; wait $!; echo $? > ", dir, "/1.status) & (", launcher(0), " > ", dir,
                        "/0.log 2>&1; echo $? > ", dir, "/0.status) & sleep 1.9; kill -STOP $(cat ",
                        pid, "); sleep 0.8; kill -CONT $(cat ", pid, "); wait"));
  const std::string log0 = ReadFile(dir + "/0.log"), log1 = ReadFile(dir + "/1.log");
  EXPECT_EQ(ReadFile(dir + "/1.status"), "1\n") << log1;
  EXPECT_TRUE(
      absl::StrContains(log1, "node 2 of 3 did not join the job's start (round 0) within 2 s"))
      << log1;
  EXPECT_FALSE(absl::StrContains(log1, "lost node 0's launcher")) << log1;
  EXPECT_EQ(ReadFile(dir + "/0.status"), "1\n") << log0;
}

// Node 0's launcher is stopped (SIGSTOP) 1.5 s in, as a cut-off host looks: its store keeps
// its connections and the kernel still accepts new ones, but nothing is answered. Node 1 counts
// node 0 lost within one node timeout (2 s) and ends; its request, reconnect and retry share one
// deadline (agent_client.cc). Before, the request had a node timeout, the reconnect's token
// answer at least 5 s more: node 1 ran on for 7 s, and a chaos trial's cut-off launcher to twice
// the node timeout.
TEST(RestartRoundsTest, ACutOffNodeZeroIsLostWithinOneNodeTimeout) {
  const std::string dir = ::testing::TempDir() + "/rounds_cut_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const int port = ddpkit::testing_util::FreeLocalPort();
  auto launcher = [&](int k) {
    return RoundLauncher(k, port, 0, "exec sleep 30", /*node_timeout=*/2);
  };
  Result r = RunShell(absl::StrCat(
      launcher(0), " > ", dir, "/0.log 2>&1 & node0=$!; (", launcher(1), " > ", dir,
      "/1.log 2>&1; echo $? > ", dir, "/1.status) & node1=$!; sleep 1.5; kill -STOP $node0; ",
      "stopped=$(date +%s%N); wait $node1; echo ms=$(( ($(date +%s%N) - stopped) / 1000000 )); ",
      "kill -KILL $node0; wait"));
  const std::string log1 = ReadFile(dir + "/1.log");
  EXPECT_EQ(ReadFile(dir + "/1.status"), "1\n") << log1;
  EXPECT_TRUE(absl::StrContains(log1, "lost node 0's launcher (the agent store at 127.0.0.1:"))
      << log1;
  const size_t at = r.out.find("ms=");
  ASSERT_NE(at, std::string::npos) << r.out;
  // 2 s node timeout, a poll's 0.1 s, 0.5 s teardown grace, and slack for a loaded machine.
  EXPECT_LT(std::stod(r.out.substr(at + 3)), 1000 * (2 + 0.1 + 0.5 + 1.4)) << r.out << log1;
}

// CI's short chaos run: every signalled job ends with a clear error and leaves no process
// behind (`ddpkit chaos` exits 0 only then). The time limit is timeout + 10 s here, not the
// target's + 5 s: CI runs this beside other tests, where a rank stopped during set-up leaves
// its peers seconds of set-up before the collective whose timeout starts the clock. Under
// ASan that set-up is three times longer (a CI run measured 13.2 s for a rank stopped at
// 1.8 s), so there the limit is + 25 s. docs/reliability.md has the 50-trial measurement
// against the real target.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kChaosSlackSeconds = 25;
#else
constexpr int kChaosSlackSeconds = 10;
#endif

TEST(ChaosTest, SignalledJobsEndClearlyInTimeWithNothingLeftOver) {
  const std::string dir = ::testing::TempDir() + "/chaos_" + std::to_string(::getpid());
  Result r = RunShell(absl::StrCat(kDdpkit,
                                   " chaos --trials 4 --timeout 3 --seed 11 --max-delay 2 --slack ",
                                   kChaosSlackSeconds, " --log-dir ", dir));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "4 trials: 4 ended with a clear error")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "0 over); 0 process(es) left over")) << r.out;
}

}  // namespace
