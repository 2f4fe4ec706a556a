#include "comm/mpi/allreduce_algorithm.h"

#include <mpi.h>

#include "autograd/base/error.h"
#include "comm/mpi/mpi_runtime.h"

namespace ddpkit::comm::mpi {
namespace {

constexpr char kVariable[] = "coll_libnbc_iallreduce_algorithm";
constexpr int kLibnbcOwn = 0, kLibnbcRing = 1;  // its values (ompi_info --param coll libnbc)

struct Control {
  bool writable = false;
  int users = kLibnbcOwn;  // what the variable held at start: not 0, the user set it
  int written = kLibnbcOwn;
  MPI_T_cvar_handle handle = MPI_T_CVAR_HANDLE_NULL;
  std::mutex mutex;
};

// Finds the variable through MPI's tool interface. Writable only where its scope allows
// writes after MPI_Init and it is one int.
void Open(Control& c) {
  int provided = 0, index = 0, count = 0;
  if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS ||
      MPI_T_cvar_get_index(kVariable, &index) != MPI_SUCCESS) {
    return;
  }
  char name[256], description[1024];
  int name_length = sizeof name, description_length = sizeof description;
  int verbosity = 0, bind = 0, scope = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_T_enum enumtype = MPI_T_ENUM_NULL;
  if (MPI_T_cvar_get_info(index, name, &name_length, &verbosity, &type, &enumtype, description,
                          &description_length, &bind, &scope) != MPI_SUCCESS ||
      type != MPI_INT || scope == MPI_T_SCOPE_CONSTANT || scope == MPI_T_SCOPE_READONLY ||
      MPI_T_cvar_handle_alloc(index, nullptr, &c.handle, &count) != MPI_SUCCESS || count != 1 ||
      MPI_T_cvar_read(c.handle, &c.users) != MPI_SUCCESS) {
    return;
  }
  c.written = c.users;
  c.writable = true;
}

// One per process, for its lifetime (MPI_Finalize frees the tool interface's handles).
Control& TheControl() {
  static Control* const control = [] {
    auto* c = new Control;
    Open(*c);
    return c;
  }();
  return *control;
}

}  // namespace

AllreduceAlgorithm AllreduceAlgorithmFor(int64_t bytes) {
  const Control& c = TheControl();
  if (!c.writable) return AllreduceAlgorithm::kUnchanged;
  if (c.users != kLibnbcOwn) return AllreduceAlgorithm::kUsers;
  if (!EveryRankHasACore()) return AllreduceAlgorithm::kLibraryDefault;
  return bytes >= kRingFromBytes ? AllreduceAlgorithm::kRing : AllreduceAlgorithm::kLibraryDefault;
}

std::unique_lock<std::mutex> ChooseAllreduceAlgorithm(int64_t bytes, absl::Status& status) {
  Control& c = TheControl();
  std::unique_lock<std::mutex> lock(c.mutex);
  status = absl::OkStatus();
  const AllreduceAlgorithm a = AllreduceAlgorithmFor(bytes);
  if (a != AllreduceAlgorithm::kRing && a != AllreduceAlgorithm::kLibraryDefault) return lock;
  int value = a == AllreduceAlgorithm::kRing ? kLibnbcRing : kLibnbcOwn;
  if (value == c.written) return lock;
  if (const int code = MPI_T_cvar_write(c.handle, &value); code != MPI_SUCCESS) {
    // Another rank's write may have taken: the ranks could now run different algorithms.
    status = absl::InternalError(
        StrCat("mpi: Open MPI refused to set ", kVariable, " to ", value, " for a ", bytes,
               "-byte allreduce (MPI_T_cvar_write returned ", code,
               "), so the ranks may disagree on "
               "the algorithm; set it for every rank yourself: mpirun --mca ",
               kVariable, " 1 (ring) or 2 (binomial)"));
    return lock;
  }
  c.written = value;
  return lock;
}

std::string DescribeAllreduceAlgorithms() {
  const Control& c = TheControl();
  if (!c.writable) return StrCat("the MPI library's own (no writable ", kVariable, ")");
  if (c.users != kLibnbcOwn) return StrCat("the user's ", kVariable, "=", c.users, ", every size");
  if (!EveryRankHasACore()) {
    return StrCat("libnbc's own at every size: a host's ranks outnumber its cores (here ",
                  RanksOnThisHost(), " on ", CoresOnThisHost(), ")");
  }
  return StrCat("ring from ", kRingFromBytes >> 10, " KiB, libnbc's own choice below");
}

}  // namespace ddpkit::comm::mpi
