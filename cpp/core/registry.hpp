// SPDX-License-Identifier: Apache-2.0
// A registry of factories by type name, filled by static registration (CORTADO_REGISTER_*).
// Layers, solvers and communicator backends each have one. Registration happens during static
// initialisation of libcortado.so; lookups afterwards are read-only and thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace cortado {

template <typename Base, typename... Args>
class Registry {
 public:
  using Factory = std::function<std::unique_ptr<Base>(Args...)>;

  static Registry& Get() {
    static Registry registry;
    return registry;
  }

  // Adds a factory; registering a name twice is a programming error.
  void Register(const std::string& type, Factory factory) {
    CORTADO_CHECK(factories_.count(type) == 0, "type '{}' registered twice", type);
    factories_.emplace(type, std::move(factory));
  }

  bool Has(const std::string& type) const { return factories_.count(type) != 0; }

  // Creates an object of `type`; an unknown type throws kInvalidArgument listing the known ones.
  // `what` names the kind of object for the message ("layer type", "solver type").
  std::unique_ptr<Base> Create(const std::string& type, const std::string& what,
                               Args... args) const {
    auto it = factories_.find(type);
    if (it == factories_.end()) {
      CORTADO_THROW(kInvalidArgument, "unknown {} '{}' (known: {})", what, type,
                    fmt::join(Types(), ", "));
    }
    return it->second(std::forward<Args>(args)...);
  }

  // The registered names, sorted.
  std::vector<std::string> Types() const {
    std::vector<std::string> types;
    for (const auto& entry : factories_) types.push_back(entry.first);
    return types;
  }

 private:
  Registry() = default;
  std::map<std::string, Factory> factories_;
};

// Registers a factory at static-initialisation time.
template <typename Base, typename... Args>
struct Registerer {
  Registerer(const std::string& type, typename Registry<Base, Args...>::Factory factory) {
    Registry<Base, Args...>::Get().Register(type, std::move(factory));
  }
};

}  // namespace cortado
