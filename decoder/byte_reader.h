// ByteReader: a bounds-checked, zero-copy cursor over a byte buffer, in the style of
// LevelDB's util/coding.h parsers: every Read* reads from the front of the remaining
// bytes, advances past them and returns true; on failure it returns false, leaves the
// cursor where it was and records what was missing (see error()).
//
// All integers are big-endian (network order), as in the PostgreSQL wire protocol.
//
// Lifetime: the string_views handed out by ReadString / ReadBytes / rest() point into the
// buffer given to the constructor; they are valid while that buffer is.
// Thread safety: none; a reader is a small value owned by one parser.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace walrelay::decoder {

// Why the last read failed. `offset` is relative to the start of the reader's buffer.
struct ReadError {
  size_t offset = 0;     // where the failed read started
  size_t needed = 0;     // bytes the read needed (0 for an unterminated string)
  size_t available = 0;  // bytes that were left
  bool unterminated_string = false;
};

class ByteReader {
 public:
  ByteReader() = default;
  explicit ByteReader(std::string_view data) : data_(data) {}

  size_t offset() const { return pos_; }
  size_t remaining() const { return data_.size() - pos_; }
  bool empty() const { return pos_ == data_.size(); }
  // The unread bytes.
  std::string_view rest() const { return data_.substr(pos_); }
  // The whole buffer the reader was built on.
  std::string_view data() const { return data_; }

  bool ReadUint8(uint8_t* out) {
    if (!Need(1)) return false;
    *out = static_cast<uint8_t>(data_[pos_]);
    pos_ += 1;
    return true;
  }
  bool ReadInt8(int8_t* out) {
    uint8_t v;
    if (!ReadUint8(&v)) return false;
    *out = static_cast<int8_t>(v);
    return true;
  }
  bool ReadUint16(uint16_t* out) { return ReadBigEndian(out); }
  bool ReadInt16(int16_t* out) { return ReadSigned<uint16_t>(out); }
  bool ReadUint32(uint32_t* out) { return ReadBigEndian(out); }
  bool ReadInt32(int32_t* out) { return ReadSigned<uint32_t>(out); }
  bool ReadUint64(uint64_t* out) { return ReadBigEndian(out); }
  bool ReadInt64(int64_t* out) { return ReadSigned<uint64_t>(out); }

  // A NUL-terminated string; `out` excludes the NUL, the cursor moves past it.
  bool ReadString(std::string_view* out) {
    const char* begin = data_.data() + pos_;
    // memchr must not see a null pointer, even with length 0 (an empty string_view).
    const void* nul = remaining() == 0 ? nullptr : std::memchr(begin, '\0', remaining());
    if (nul == nullptr) {
      error_ = ReadError{pos_, 0, remaining(), true};
      return false;
    }
    const size_t len = static_cast<size_t>(static_cast<const char*>(nul) - begin);
    *out = std::string_view(begin, len);
    pos_ += len + 1;
    return true;
  }

  // Exactly n bytes.
  bool ReadBytes(size_t n, std::string_view* out) {
    if (!Need(n)) return false;
    *out = data_.substr(pos_, n);
    pos_ += n;
    return true;
  }

  bool Skip(size_t n) {
    if (!Need(n)) return false;
    pos_ += n;
    return true;
  }

  // Valid after a Read* returned false; describes that failure.
  const ReadError& error() const { return error_; }

  // "truncated at offset 17: need 4 bytes for column length, have 2" or
  // "truncated at offset 9: unterminated string for relation name (5 bytes left)".
  std::string ErrorText(std::string_view field) const {
    std::string s = "truncated at offset " + std::to_string(error_.offset) + ": ";
    if (error_.unterminated_string) {
      s += "unterminated string for ";
      s += field;
      s += " (" + std::to_string(error_.available) + " bytes left)";
    } else {
      s += "need " + std::to_string(error_.needed) + " bytes for ";
      s += field;
      s += ", have " + std::to_string(error_.available);
    }
    return s;
  }

 private:
  bool Need(size_t n) {
    if (n <= remaining()) return true;
    error_ = ReadError{pos_, n, remaining(), false};
    return false;
  }

  template <typename U>
  bool ReadBigEndian(U* out) {
    if (!Need(sizeof(U))) return false;
    U v = 0;
    for (size_t i = 0; i < sizeof(U); ++i) {
      v = static_cast<U>((v << 8) | static_cast<uint8_t>(data_[pos_ + i]));
    }
    *out = v;
    pos_ += sizeof(U);
    return true;
  }

  template <typename U, typename S>
  bool ReadSigned(S* out) {
    U v;
    if (!ReadBigEndian(&v)) return false;
    *out = static_cast<S>(v);  // two's complement (guaranteed since C++20)
    return true;
  }

  std::string_view data_;
  size_t pos_ = 0;
  ReadError error_;
};

// Unchecked big-endian loads for bytes a ByteReader has already validated.
// REQUIRES: p points at least sizeof(result) readable bytes.
inline uint32_t LoadBigEndian32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | uint32_t{u[3]};
}

}  // namespace walrelay::decoder
