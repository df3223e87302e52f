// Option dicts from Python, shared by every engine's binding: typed lookups with
// defaults, and unknown keys refused with the list of known ones.
#pragma once

#include <pybind11/pybind11.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace harness_py {

template <typename T>
T get(const pybind11::dict & d, const char * key, T def) {
    return d.contains(key) && !d[key].is_none() ? d[key].cast<T>() : def;
}

inline void check_keys(const pybind11::dict & d, const std::vector<std::string> & known, const char * what) {
    for (auto item : d) {
        auto k = item.first.cast<std::string>();
        if (std::find(known.begin(), known.end(), k) == known.end()) {
            std::string all;
            for (auto & x : known) all += (all.empty() ? "" : ", ") + x;
            throw std::invalid_argument(std::string("unknown ") + what + " '" + k + "' (known: " + all + ")");
        }
    }
}

}  // namespace harness_py
