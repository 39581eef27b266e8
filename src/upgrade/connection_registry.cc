// Each fd with a Connection points to a Holder: the Connection's shared_ptr
// and a reference count (the fd's own reference, plus one per reader copying
// the shared_ptr out). Holders are type-stable: never freed, only recycled
// through a lock-free free list, so a reader may touch the count of a holder
// that another thread has just released. It then finds the count 0 (and
// looks again), or finds that its fd no longer points to that holder (and
// looks again); a holder recycled onto the same fd meanwhile is simply the
// fd's current one.
#include "upgrade/connection_registry.h"

#include <atomic>
#include <cstdint>
#include <new>

#include "common/fd_indexed_array.h"
#include "common/wiped_on_fork.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace qpsock::upgrade {
namespace {

struct Holder {
  std::atomic<uint32_t> references{0};
  std::atomic<uint32_t> next_free{0};  // index + 1 of the next free holder, 0: none
  std::shared_ptr<Connection> connection;
};

// A lock-free stack of holders, linked by next_free; `top` is tag << 32 |
// (index + 1), 0 when empty: the tag defeats ABA.
class HolderStack {
 public:
  Holder* pop(FdIndexedArray<Holder>& storage) {
    uint64_t top = top_.load(std::memory_order_acquire);
    while (static_cast<uint32_t>(top) != 0) {
      Holder* holder = storage.at(static_cast<int>(static_cast<uint32_t>(top) - 1));
      const uint64_t next = ((top >> 32) + 1) << 32 | holder->next_free.load(std::memory_order_relaxed);
      if (top_.compare_exchange_weak(top, next, std::memory_order_acq_rel)) {
        size_.fetch_sub(1, std::memory_order_relaxed);
        return holder;
      }
    }
    return nullptr;
  }

  void push(FdIndexedArray<Holder>& storage, Holder* holder) {
    const auto index = static_cast<uint32_t>(holder - storage.at(0));
    size_.fetch_add(1, std::memory_order_relaxed);
    uint64_t top = top_.load(std::memory_order_relaxed);
    for (;;) {
      holder->next_free.store(static_cast<uint32_t>(top), std::memory_order_relaxed);
      const uint64_t next = ((top >> 32) + 1) << 32 | (index + 1);
      if (top_.compare_exchange_weak(top, next, std::memory_order_acq_rel)) return;
    }
  }

  uint32_t size() const { return size_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> top_{0};
  std::atomic<uint32_t> size_{0};
};

// Room for one holder per fd, and as many again for holders an fd has let go
// of while a reader still held them (and for ready ones).
struct HolderPool {
  FdIndexedArray<Holder> storage{2 * fd_indexed_memory::capacity_from_rlimit()};
  std::atomic<uint32_t> used{0};  // holders ever constructed, the first `used` of storage
  HolderStack free;
  // Holders that carry a server Connection no fd has had yet, made where
  // allocating is safe, for an offer's first I/O to take.
  HolderStack ready;

  Holder* take() {
    if (Holder* recycled = free.pop(storage)) return recycled;
    const uint32_t index = used.fetch_add(1, std::memory_order_relaxed);
    Holder* fresh = storage.at(static_cast<int>(index));
    if (fresh == nullptr) return nullptr;
    return ::new (fresh) Holder;
  }

  void give_back(Holder* holder) { free.push(storage, holder); }
};

// Stands on an fd's slot for an offer not yet claimed: never a holder's address.
Holder* const kUnclaimedOffer = reinterpret_cast<Holder*>(uintptr_t{1});

bool is_holder(const Holder* holder) { return holder != nullptr && holder != kUnclaimedOffer; }

// The offers this process made and neither claimed nor closed, which its
// ready holders must cover. A forked child starts from none and never goes
// below: the offers it inherited have the ready holders it inherited
// (without wiped memory it starts from its parent's count, and keeps more
// ready than it needs). A forking server's parent writes it without a
// copy-on-write fault.
struct OutstandingOffers {
  std::atomic<int64_t> count;
};
using OutstandingOffersMemory = WipedOnFork<OutstandingOffers>;

void count_offer_made() { OutstandingOffersMemory::get().count.fetch_add(1, std::memory_order_relaxed); }

// A server Connection made ready for a claim. It may wait in its holder for
// as long as the process lives, in memory the leak checker does not scan.
std::shared_ptr<Connection> make_ready_connection() {
#if defined(__SANITIZE_ADDRESS__)
  const __lsan::ScopedDisabler kept_for_a_claim;
#endif
  return std::make_shared<Connection>(config::Role::server);
}

void count_offer_gone() {
  std::atomic<int64_t>& count = OutstandingOffersMemory::get().count;
  int64_t current = count.load(std::memory_order_relaxed);
  while (current > 0 && !count.compare_exchange_weak(current, current - 1, std::memory_order_relaxed)) {
  }
}

struct Registry {
  FdIndexedArray<std::atomic<Holder*>> by_fd;
  HolderPool holders;
  std::atomic<size_t> count{0};     // fds with a Connection
  std::atomic<int> highest_fd{-1};  // bounds visit_connections' scan
  std::atomic<bool> offers_made{false};
};

Registry& registry() {
  // Never destroyed: data calls may come from exit handlers after static destructors.
  alignas(Registry) static unsigned char storage[sizeof(Registry)];
  static Registry* instance = ::new (storage) Registry;
  return *instance;
}

void release(Registry& entries, Holder* holder) {
  if (holder->references.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // The last reference: nobody can take a new one from a count of 0.
  std::shared_ptr<Connection> last = std::move(holder->connection);
  entries.holders.give_back(holder);
}

// A counted reference to fd's current holder, or null.
Holder* acquire(std::atomic<Holder*>& slot) {
  for (;;) {
    Holder* holder = slot.load(std::memory_order_acquire);
    if (!is_holder(holder)) return nullptr;
    uint32_t references = holder->references.load(std::memory_order_acquire);
    bool counted = false;
    while (references != 0 && !counted)
      counted = holder->references.compare_exchange_weak(references, references + 1,
                                                         std::memory_order_acq_rel);
    if (!counted) continue;  // released meanwhile: the slot has changed
    if (slot.load(std::memory_order_acquire) == holder) return holder;
    release(registry(), holder);
  }
}

void note_highest_fd(Registry& entries, int fd) {
  int highest = entries.highest_fd.load(std::memory_order_relaxed);
  while (fd > highest && !entries.highest_fd.compare_exchange_weak(highest, fd, std::memory_order_relaxed)) {
  }
}

// Puts `holder` (null: nothing; or kUnclaimedOffer) on fd, its reference
// passing to the slot, and returns the connection that was there.
std::shared_ptr<Connection> replace(Registry& entries, std::atomic<Holder*>& slot, Holder* holder) {
  Holder* previous = slot.exchange(holder, std::memory_order_acq_rel);
  if (is_holder(holder) && !is_holder(previous)) entries.count.fetch_add(1, std::memory_order_acq_rel);
  if (!is_holder(holder) && is_holder(previous)) entries.count.fetch_sub(1, std::memory_order_acq_rel);
  if (previous == kUnclaimedOffer) count_offer_gone();
  if (!is_holder(previous)) return nullptr;
  // The slot's reference is ours now: the holder cannot be recycled under us.
  std::shared_ptr<Connection> replaced = previous->connection;
  replaced->fd_detached();
  release(entries, previous);
  return replaced;
}

}  // namespace

bool any_connections() { return registry().count.load(std::memory_order_relaxed) != 0; }

bool any_offers() { return registry().offers_made.load(std::memory_order_relaxed); }

bool any_connections_or_offers() { return any_connections() || any_offers(); }

ConnectionHold hold_connection(int fd) {
  ConnectionHold hold;
  Registry& entries = registry();
  if (entries.count.load(std::memory_order_acquire) == 0) return hold;
  std::atomic<Holder*>* slot = entries.by_fd.at(fd);
  if (slot == nullptr) return hold;
  Holder* holder = acquire(*slot);
  if (holder == nullptr) return hold;
  hold.holder_ = holder;
  hold.connection_ = holder->connection.get();
  return hold;
}

void ConnectionHold::let_go() { release(registry(), static_cast<Holder*>(holder_)); }

std::shared_ptr<Connection> ConnectionHold::shared() const {
  return holder_ != nullptr ? static_cast<Holder*>(holder_)->connection : nullptr;
}

std::shared_ptr<Connection> find_connection(int fd) { return hold_connection(fd).shared(); }

std::shared_ptr<Connection> attach_connection(int fd, std::shared_ptr<Connection> connection) {
  Registry& entries = registry();
  std::atomic<Holder*>* slot = entries.by_fd.at(fd);
  if (slot == nullptr || connection == nullptr) return nullptr;
  Holder* holder = entries.holders.take();
  if (holder == nullptr) return nullptr;  // no memory: the socket stays on the kernel path
  connection->fd_attached();
  holder->connection = std::move(connection);
  holder->references.store(1, std::memory_order_release);
  note_highest_fd(entries, fd);
  return replace(entries, *slot, holder);
}

std::shared_ptr<Connection> offer_unclaimed(int fd) {
  Registry& entries = registry();
  std::atomic<Holder*>* slot = entries.by_fd.at(fd);
  if (slot == nullptr) return nullptr;
  if (!entries.offers_made.load(std::memory_order_relaxed))
    entries.offers_made.store(true, std::memory_order_relaxed);
  count_offer_made();
  // One ready for each offer outstanding and one more (for an inherited
  // offer a child claims while its own are outstanding), so that a claim
  // never finds none. A forking server's parent, whose offers all close
  // unclaimed, makes two once.
  const int64_t outstanding = OutstandingOffersMemory::get().count.load(std::memory_order_relaxed);
  while (static_cast<int64_t>(entries.holders.ready.size()) < outstanding + 1) {
    Holder* holder = entries.holders.take();
    if (holder == nullptr) break;
    holder->connection = make_ready_connection();
    entries.holders.ready.push(entries.holders.storage, holder);
  }
  return replace(entries, *slot, kUnclaimedOffer);
}

ConnectionHold claim_offer(int fd, stream::FunctionRef<void(Connection&)> prepare) {
  Registry& entries = registry();
  std::atomic<Holder*>* slot = entries.by_fd.at(fd);
  if (slot == nullptr || slot->load(std::memory_order_acquire) != kUnclaimedOffer) return hold_connection(fd);
  Holder* holder = entries.holders.ready.pop(entries.holders.storage);
  // None ready (no memory at the offer): the socket stays the kernel's until one is.
  if (holder == nullptr) return {};
  prepare(*holder->connection);
  holder->connection->fd_attached();
  // The slot's reference and the hold's.
  holder->references.store(2, std::memory_order_release);
  // Counted before the slot holds it: no lookup finds a count of 0 then.
  entries.count.fetch_add(1, std::memory_order_acq_rel);
  Holder* expected = kUnclaimedOffer;
  if (!slot->compare_exchange_strong(expected, holder, std::memory_order_acq_rel)) {
    // Claimed or closed meanwhile: the holder is ready again, unused.
    entries.count.fetch_sub(1, std::memory_order_acq_rel);
    holder->connection->fd_detached();
    holder->references.store(0, std::memory_order_relaxed);
    entries.holders.ready.push(entries.holders.storage, holder);
    return hold_connection(fd);
  }
  count_offer_gone();
  note_highest_fd(entries, fd);
  ConnectionHold hold;
  hold.holder_ = holder;
  hold.connection_ = holder->connection.get();
  return hold;
}

std::shared_ptr<Connection> detach_connection(int fd) {
  Registry& entries = registry();
  if (!any_connections_or_offers()) return nullptr;
  std::atomic<Holder*>* slot = entries.by_fd.at(fd);
  return slot != nullptr ? replace(entries, *slot, nullptr) : nullptr;
}

std::shared_ptr<Connection> copy_connection(int source, int destination) {
  std::shared_ptr<Connection> shared = find_connection(source);
  std::shared_ptr<Connection> displaced =
      shared == nullptr ? detach_connection(destination) : attach_connection(destination, shared);
  return displaced != shared ? displaced : nullptr;
}

int attached_fd(const Connection* connection, int preferred, int excluded) {
  if (preferred >= 0 && preferred != excluded && find_connection(preferred).get() == connection)
    return preferred;
  Registry& entries = registry();
  if (entries.count.load(std::memory_order_acquire) == 0) return -1;
  const int highest = entries.highest_fd.load(std::memory_order_acquire);
  for (int fd = 0; fd <= highest; fd++) {
    if (fd != excluded && find_connection(fd).get() == connection) return fd;
  }
  return -1;
}

bool connection_in_use(const Connection* connection) { return connection->attached_fds() > 0; }

int highest_connection_fd() { return registry().highest_fd.load(std::memory_order_acquire); }

void visit_connections(stream::FunctionRef<void(int fd, Connection& connection)> visit) {
  Registry& entries = registry();
  if (entries.count.load(std::memory_order_acquire) == 0) return;
  const int highest = entries.highest_fd.load(std::memory_order_acquire);
  for (int fd = 0; fd <= highest; fd++) {
    if (std::shared_ptr<Connection> connection = find_connection(fd)) visit(fd, *connection);
  }
}

}  // namespace qpsock::upgrade
