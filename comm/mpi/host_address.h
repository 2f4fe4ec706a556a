// Where the other hosts of an mpi job reach this one: rank 0 publishes it for the job's store.
#pragma once

#include <string>

namespace ddpkit::comm::mpi {

// This host's name when it resolves to an address other hosts can reach; else the first IPv4
// address of an interface that is up and not loopback (the name resolves to 127.x where
// /etc/hosts maps it there, as Debian's does, and network-namespace "hosts" all share the
// machine's one name); else the name, for the connecting rank's error to show.
std::string AddressForOtherHosts();

}  // namespace ddpkit::comm::mpi
