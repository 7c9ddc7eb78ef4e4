// SPDX-License-Identifier: GPL-2.0-or-later
// Minimal C++20 coroutines for the metadata thread, which runs many metadata operations at once
// (each a sequence of child I/Os with ordering rules between them) on one thread without locks.
//
// Task<T> is lazy: it starts when awaited and resumes its awaiter when it finishes (symmetric
// transfer, so chains do not grow the stack). Spawn() starts a Task<void> that nobody awaits.
// Nothing here is thread-safe: every coroutine of a Scheduler runs on the scheduler's thread, and
// resumption happens only from Scheduler::RunReady(), never inside a child queue's callback.
#pragma once

#include <coroutine>
#include <cstdint>
#include <deque>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

namespace bexd::block::qcow2 {

class Scheduler {
 public:
  void Schedule(std::coroutine_handle<> handle) { ready_.push_back(handle); }
  // Resumes every ready coroutine, including those made ready meanwhile; true if it ran any.
  bool RunReady() {
    bool ran = false;
    while (!ready_.empty()) {
      std::coroutine_handle<> handle = ready_.front();
      ready_.pop_front();
      handle.resume();
      ran = true;
    }
    return ran;
  }
  bool idle() const { return ready_.empty(); }

 private:
  std::deque<std::coroutine_handle<>> ready_;
};

template <typename T>
class Task;

namespace internal {

struct PromiseBase {
  std::coroutine_handle<> continuation;
  std::suspend_always initial_suspend() noexcept { return {}; }
  struct FinalAwaiter {
    bool await_ready() noexcept { return false; }
    template <typename Promise>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> handle) noexcept {
      std::coroutine_handle<> next = handle.promise().continuation;
      return next ? next : std::noop_coroutine();
    }
    void await_resume() noexcept {}
  };
  FinalAwaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() { std::terminate(); }
};

template <typename T>
struct Promise : PromiseBase {
  std::optional<T> value;
  Task<T> get_return_object();
  void return_value(T v) { value.emplace(std::move(v)); }
};

template <>
struct Promise<void> : PromiseBase {
  Task<void> get_return_object();
  void return_void() {}
};

}  // namespace internal

template <typename T = void>
class [[nodiscard]] Task {
 public:
  using promise_type = internal::Promise<T>;

  explicit Task(std::coroutine_handle<promise_type> handle) : handle_(handle) {}
  Task(Task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  ~Task() {
    if (handle_) handle_.destroy();
  }
  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
    handle_.promise().continuation = awaiting;
    return handle_;
  }
  T await_resume() {
    if constexpr (!std::is_void_v<T>) return std::move(*handle_.promise().value);
  }

 private:
  std::coroutine_handle<promise_type> handle_;
};

namespace internal {

template <typename T>
Task<T> Promise<T>::get_return_object() {
  return Task<T>(std::coroutine_handle<Promise<T>>::from_promise(*this));
}

inline Task<void> Promise<void>::get_return_object() {
  return Task<void>(std::coroutine_handle<Promise<void>>::from_promise(*this));
}

}  // namespace internal

namespace internal {
struct Detached {
  struct promise_type {
    Detached get_return_object() { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() { std::terminate(); }
  };
};
}  // namespace internal

// Starts `task` now; it runs until its first suspension and frees itself when it finishes.
inline internal::Detached Spawn(Task<void> task) { co_await task; }

// Coroutines waiting for something; Wake*() makes them ready on the scheduler.
class WaitList {
 public:
  explicit WaitList(Scheduler* scheduler) : scheduler_(scheduler) {}
  auto Wait() {
    struct Awaiter {
      WaitList* list;
      bool await_ready() const noexcept { return false; }
      void await_suspend(std::coroutine_handle<> handle) { list->waiters_.push_back(handle); }
      void await_resume() const noexcept {}
    };
    return Awaiter{this};
  }
  void WakeAll() {
    while (!waiters_.empty()) {
      scheduler_->Schedule(waiters_.front());
      waiters_.pop_front();
    }
  }
  void WakeOne() {
    if (waiters_.empty()) return;
    scheduler_->Schedule(waiters_.front());
    waiters_.pop_front();
  }
  bool empty() const { return waiters_.empty(); }

 private:
  Scheduler* scheduler_;
  std::deque<std::coroutine_handle<>> waiters_;
};

// A FIFO mutex for coroutines: Lock() is awaited; Unlock() hands ownership to the next waiter.
class AsyncMutex {
 public:
  explicit AsyncMutex(Scheduler* scheduler) : waiters_(scheduler) {}
  auto Lock() {
    struct Awaiter {
      AsyncMutex* mutex;
      bool await_ready() noexcept {
        if (mutex->locked_) return false;
        mutex->locked_ = true;
        return true;
      }
      void await_suspend(std::coroutine_handle<> handle) {
        mutex->waiters_.Wait().await_suspend(handle);
      }
      void await_resume() const noexcept {}
    };
    return Awaiter{this};
  }
  void Unlock() {
    if (waiters_.empty()) {
      locked_ = false;
    } else {
      waiters_.WakeOne();  // stays locked for the next owner
    }
  }
  bool locked() const { return locked_; }

 private:
  bool locked_ = false;
  WaitList waiters_;
};

// Unlocks an AsyncMutex when it goes out of scope (after `co_await mutex.Lock()`).
class AsyncLockGuard {
 public:
  explicit AsyncLockGuard(AsyncMutex& mutex) : mutex_(&mutex) {}
  ~AsyncLockGuard() {
    if (mutex_ != nullptr) mutex_->Unlock();
  }
  AsyncLockGuard(const AsyncLockGuard&) = delete;
  AsyncLockGuard& operator=(const AsyncLockGuard&) = delete;

 private:
  AsyncMutex* mutex_;
};

}  // namespace bexd::block::qcow2
