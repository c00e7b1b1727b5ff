// Status and Result<T>: explicit, cheap error values. No exceptions cross library
// boundaries in walrelay; every fallible call returns one of these.
//
// The code tells the caller what to do next (after absl::StatusCode):
//   kInvalidArgument     the caller passed something wrong (bad option, bad config).
//   kDataLoss            the input bytes are malformed: a definite error, do not retry
//                        the same bytes. Decoders report the message type and offset.
//   kUnavailable         transient: retry the call (connection lost, broker down).
//   kFailedPrecondition  an operator must fix state first (wal_level, privileges, ...).
//   kNotFound / kAlreadyExists  the named object is missing / present.
//   kResourceExhausted   a limit was reached (queue full, size cap).
//   kDeadlineExceeded    a bounded wait ran out.
//   kCancelled           shutdown was requested.
//   kPermissionDenied    the role lacks a privilege.
//   kInternal            a bug: an invariant of walrelay itself broke.
//
// Thread safety: values; copy freely.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace walrelay {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,
  kDataLoss,
  kUnavailable,
  kFailedPrecondition,
  kNotFound,
  kAlreadyExists,
  kResourceExhausted,
  kDeadlineExceeded,
  kCancelled,
  kPermissionDenied,
  kInternal,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "OK" or "<CODE>: <message>".
  std::string ToString() const;

  // Returns a status with the same code and "context: message".
  Status WithContext(std::string_view context) const;

  // Explicitly drops a status the caller has decided not to act on.
  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgumentError(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status DataLossError(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status FailedPreconditionError(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExistsError(std::string m) {
  return {StatusCode::kAlreadyExists, std::move(m)};
}
inline Status ResourceExhaustedError(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status DeadlineExceededError(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status CancelledError(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status PermissionDeniedError(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Result<T> holds a T or a non-OK Status (shaped like std::expected<T, Status>).
// REQUIRES: value() only when ok(); status() is OK when a value is held.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}        // NOLINT: implicit
  Result(Status status) : v_(std::in_place_index<1>, std::move(status)) {  // NOLINT: implicit
    assert(!std::get<1>(v_).ok() && "Result built from an OK status");
  }

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  Status status() const { return ok() ? Status::Ok() : std::get<1>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace walrelay

// Propagates a non-OK Status from an expression returning Status.
#define WALRELAY_RETURN_IF_ERROR(expr) \
  do {                                 \
    ::walrelay::Status _st = (expr);   \
    if (!_st.ok()) return _st;         \
  } while (0)

#define WALRELAY_CONCAT_INNER_(a, b) a##b
#define WALRELAY_CONCAT_(a, b) WALRELAY_CONCAT_INNER_(a, b)
// Declares `lhs` from a Result<T> expression, or returns its Status.
#define WALRELAY_ASSIGN_OR_RETURN(lhs, expr)                                                      \
  auto WALRELAY_CONCAT_(_res_, __LINE__) = (expr);                                                \
  if (!WALRELAY_CONCAT_(_res_, __LINE__).ok()) return WALRELAY_CONCAT_(_res_, __LINE__).status(); \
  lhs = std::move(WALRELAY_CONCAT_(_res_, __LINE__)).value()
