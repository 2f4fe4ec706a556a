// torchrun's variables from Slurm's, for ranks that `srun` starts directly (one task per rank,
// no `ddpkit launch`): what the environment does not set itself comes from SLURM_*.
//
//   RANK              SLURM_PROCID
//   WORLD_SIZE        SLURM_NTASKS
//   LOCAL_RANK        SLURM_LOCALID
//   LOCAL_WORLD_SIZE  this node's entry of SLURM_TASKS_PER_NODE ("4(x2),3": 4, 4, 3)
//   MASTER_ADDR       the first host of SLURM_JOB_NODELIST ("gpu[07-09,12],cpu1": gpu07)
//   MASTER_PORT       20000 + SLURM_JOB_ID mod 20000 (every task of the job derives the same)
//
// The mpi backend needs none of this: MPI itself gets the ranks from srun.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace ddpkit::comm {

// The variables above that Slurm's environment provides; empty outside a Slurm step
// (SLURM_PROCID unset).
std::map<std::string, std::string> TorchrunVariablesFromSlurm();

// "gpu[07-09,12],cpu1" -> "gpu07"; "" for an empty list.
std::string FirstHostOfNodelist(std::string_view nodelist);
// Tasks on node `node_id` (0-based) by SLURM_TASKS_PER_NODE's syntax ("4(x2),3"); 0 when the
// list does not reach that node or cannot be read.
int TasksOnNode(std::string_view tasks_per_node, int node_id);

}  // namespace ddpkit::comm
