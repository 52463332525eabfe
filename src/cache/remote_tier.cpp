#include "cache/remote_tier.h"

#include <cctype>

#include "cache/executable_container.h"

namespace torchneuron {
namespace {

int hexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX escapes decoded; nullopt on a malformed escape or an escaped NUL.
std::optional<std::string> percentDecoded(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    const int high = hexDigit(text[i + 1]), low = hexDigit(text[i + 2]);
    if (high < 0 || low < 0 || (high == 0 && low == 0)) return std::nullopt;
    out.push_back(static_cast<char>(high * 16 + low));
    i += 2;
  }
  return out;
}

// A decimal number from `low` to `high`, the whole of `text`.
std::optional<int> boundedNumber(const std::string& text, int low, int high) {
  if (text.empty() || text.size() > 6) return std::nullopt;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value < low || value > high) return std::nullopt;
  return value;
}

std::optional<RemoteLocation> parseRedis(const std::string& rest, std::string* why) {
  RemoteLocation where;
  where.kind = RemoteLocation::Kind::kRedis;
  std::string authority = rest, path;
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    authority = rest.substr(0, slash);
    path = rest.substr(slash + 1);
  }
  if (const size_t at = authority.rfind('@'); at != std::string::npos) {
    const std::string user_info = authority.substr(0, at);
    authority = authority.substr(at + 1);
    if (user_info.empty() || user_info[0] != ':') {
      *why = "the password goes as ':password@' (Redis AUTH takes no user name here)";
      return std::nullopt;
    }
    std::optional<std::string> password = percentDecoded(user_info.substr(1));
    if (!password || password->empty()) {
      *why = "the password is empty or has a malformed %-escape";
      return std::nullopt;
    }
    where.password = *password;
  }
  std::string port_text;
  if (!authority.empty() && authority[0] == '[') { // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == std::string::npos) {
      *why = "an IPv6 address lacks its closing ']'";
      return std::nullopt;
    }
    where.host = authority.substr(1, close - 1);
    const std::string after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') {
        *why = "expected ':port' after the IPv6 address";
        return std::nullopt;
      }
      port_text = after.substr(1);
      if (port_text.empty()) port_text = "-";
    }
  } else {
    const size_t colon = authority.find(':');
    where.host = authority.substr(0, colon);
    if (colon != std::string::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) port_text = "-";
    }
  }
  if (where.host.empty()) {
    *why = "no host";
    return std::nullopt;
  }
  for (char c : where.host)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
          c == ':')) {
      *why = std::string("the host has the character '") + c + "'";
      return std::nullopt;
    }
  if (!port_text.empty()) {
    std::optional<int> port = boundedNumber(port_text, 1, 65535);
    if (!port) {
      *why = "the port '" + port_text + "' is not a number from 1 to 65535";
      return std::nullopt;
    }
    where.port = *port;
  }
  if (!path.empty()) {
    std::optional<int> database = boundedNumber(path, 0, 65535);
    if (!database) {
      *why = "the database '" + path + "' is not a number";
      return std::nullopt;
    }
    where.database = *database;
  }
  return where;
}

std::optional<RemoteLocation> parseFile(const std::string& rest, std::string* why) {
  // file:///path, or file://localhost/path: the path is local to this host (a mount).
  std::string path = rest;
  if (path.rfind("localhost/", 0) == 0) path = path.substr(9);
  if (path.empty() || path[0] != '/') {
    *why = "a shared directory is file:///absolute/path (a path on a mount of this host)";
    return std::nullopt;
  }
  std::optional<std::string> decoded = percentDecoded(path);
  if (!decoded) {
    *why = "the path has a malformed %-escape";
    return std::nullopt;
  }
  while (decoded->size() > 1 && decoded->back() == '/')
    decoded->pop_back();
  RemoteLocation where;
  where.kind = RemoteLocation::Kind::kSharedDirectory;
  where.path = *decoded;
  return where;
}

} // namespace

std::string RemoteLocation::describe() const {
  if (kind == Kind::kSharedDirectory) return "file://" + path;
  const bool v6 = host.find(':') != std::string::npos;
  return "redis://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + "/" +
         std::to_string(database);
}

std::optional<RemoteLocation> parseRemoteLocation(const std::string& url, std::string* why) {
  std::string problem;
  std::optional<RemoteLocation> where;
  if (url.rfind("redis://", 0) == 0)
    where = parseRedis(url.substr(8), &problem);
  else if (url.rfind("file://", 0) == 0)
    where = parseFile(url.substr(7), &problem);
  else
    problem = "it is neither redis://[:password@]host[:port][/db] nor file:///path";
  if (!where) *why = problem;
  return where;
}

std::string remoteNamespace(const std::string& key_id_hex) {
  return "v" + std::to_string(kContainerFormatVersion) + "/" +
         std::string(kEngineVersion).substr(0, 16) + "/" + key_id_hex;
}

} // namespace torchneuron
