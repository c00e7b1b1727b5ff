#include "slot/conninfo.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace walrelay::slot {

Result<std::string> ReadPasswordFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return InvalidArgumentError("cannot read '" + path + "': " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return InvalidArgumentError("'" + path + "' is not a regular file");
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return PermissionDeniedError("'" + path + "' has mode " + mode +
                                 ": other users may read the password; chmod 600 '" + path +
                                 "' (libpq refuses a .pgpass like this too)");
  }
  std::ifstream in(path);
  if (!in) return InvalidArgumentError("cannot read '" + path + "'");
  std::string password;
  std::getline(in, password);
  if (!password.empty() && password.back() == '\r') password.pop_back();  // written on Windows
  if (password.empty()) {
    return InvalidArgumentError("'" + path + "' is empty: its first line must be the password");
  }
  return password;
}

}  // namespace walrelay::slot
