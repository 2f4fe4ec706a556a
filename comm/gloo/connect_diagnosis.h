// Which rank a failed Gloo connect could not reach. Gloo's connect errors name the peer only by
// the address of the socket it listens on for this rank ("Connect timeout [10.77.0.3]:4769$7");
// every rank publishes those addresses in the store before connecting (Gloo's full-mesh key
// "<rank>": one tcp::Address per peer, in rank order, itself left out), so the address in the
// error maps back to the rank that published it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/time/time.h"
#include "comm/store/store.h"

namespace ddpkit::comm {

// One address from a rank's full-mesh record: as Gloo prints it in its errors, and readable.
struct GlooPeerAddress {
  std::string gloo_text;  // tcp::Address::str(): "[10.77.0.3]:4769$7" (port in network order)
  std::string host;       // "10.77.0.3"
  int port = 0;           // 41234
};

// The address `publisher` listens on for its pair with `peer`, read from the record `published`
// it wrote under Gloo's key "<publisher>"; nullopt when `published` is no such record.
std::optional<GlooPeerAddress> AddressPublishedFor(std::string_view published, int publisher,
                                                   int peer, int size);

// "; rank 1 could not reach rank 2 (host 10.77.0.3, port 41234) while ...: check ..." when
// `gloo_error` names the address some rank published for `rank` (Gloo's keys are read from
// `store`, under "gloo/"), else "". Every store call fits in `within`, so a store host that is
// itself unreachable cannot stretch the rendezvous's failure.
std::string NameUnreachablePeer(Store& store, int rank, int size, std::string_view gloo_error,
                                absl::Duration within);

}  // namespace ddpkit::comm
