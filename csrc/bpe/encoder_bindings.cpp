// bloomdata._bpe_encoder: BLOOM's encoder of encoder.h for Python (bloomdata/tokenizer/encoder.py).
//
// Encoder(byte_ids, merges, excluded, added, ignore_merges, vocab, cache_words)
//   byte_ids: 256 ints (the token id of each byte, -1 when absent); merges: uint32[M, 3] (left, right, new id)
//   in rank order; excluded: the split's code points; added: [(content UTF-8 bytes, id, normalized)];
//   vocab: [(token bytes, id)], used with ignore_merges only; cache_words: words the cache holds at most.
// encode_batch(texts, append=-1) -> (ids uint32[N], offsets int64[len(texts) + 1]): text i's ids are
//   ids[offsets[i]:offsets[i + 1]], followed by `append` when it is not -1 (an end-of-document id).
//   A text that is not a str, or holds a lone surrogate, raises TypeError, as HF's encode_batch does.
//   The encoding runs without the GIL (one call at a time per encoder).
// cached_words, memory (bytes held by the merge table and the cache).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "encoder.h"

namespace py = pybind11;

namespace {

struct PyEncoder {
  PyEncoder(const bloombpe::EncoderTables& tables, size_t cache_words) : encoder(tables, cache_words) {}
  bloombpe::Encoder encoder;
  std::mutex busy;
};

bloombpe::EncoderTables tables_of(const std::vector<int32_t>& byte_ids,
                                  py::array_t<uint32_t, py::array::c_style | py::array::forcecast> merges,
                                  const std::vector<uint32_t>& excluded,
                                  const std::vector<std::tuple<py::bytes, uint32_t, bool>>& added, bool ignore_merges,
                                  const std::vector<std::pair<py::bytes, uint32_t>>& vocab) {
  if (byte_ids.size() != 256) throw std::invalid_argument("byte_ids must have 256 entries");
  if (merges.ndim() != 2 || merges.shape(1) != 3) throw std::invalid_argument("merges must be uint32[M, 3]");
  bloombpe::EncoderTables t;
  t.byte_ids = byte_ids;
  t.merges.assign(merges.data(), merges.data() + merges.size());
  t.excluded = excluded;
  for (const auto& [content, id, normalized] : added) t.added.push_back({std::string(content), id, normalized});
  t.ignore_merges = ignore_merges;
  for (const auto& [token, id] : vocab) t.vocab.emplace_back(std::string(token), id);
  return t;
}

py::tuple encode_batch(PyEncoder& self, const py::sequence& texts, int64_t append) {
  const size_t n = texts.size();
  std::vector<py::object> held(n);  // the strs stay alive while the GIL is released
  std::vector<std::pair<const char*, size_t>> utf8(n);
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    held[i] = texts[i];
    PyObject* text = held[i].ptr();
    if (!PyUnicode_Check(text))
      throw py::type_error("text " + std::to_string(i) + " is " + Py_TYPE(text)->tp_name + ", not str");
    Py_ssize_t len = 0;
    const char* p = PyUnicode_AsUTF8AndSize(text, &len);  // cached in the str; ASCII: its own bytes
    if (p == nullptr) {
      PyErr_Clear();
      throw py::type_error("text " + std::to_string(i) + " holds a lone surrogate (not valid Unicode text)");
    }
    utf8[i] = {p, size_t(len)};
    total += size_t(len);
  }
  std::vector<uint32_t> ids;
  std::vector<int64_t> offsets(n + 1, 0);
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(self.busy);
    ids.reserve(total / 3 + n + 16);
    for (size_t i = 0; i < n; ++i) {
      self.encoder.encode(utf8[i].first, utf8[i].second, &ids);
      if (append >= 0) ids.push_back(uint32_t(append));
      offsets[i + 1] = int64_t(ids.size());
    }
  }
  py::array_t<uint32_t> out(py::ssize_t(ids.size()));
  if (!ids.empty()) std::memcpy(out.mutable_data(), ids.data(), ids.size() * sizeof(uint32_t));
  return py::make_tuple(out, py::array_t<int64_t>(py::ssize_t(offsets.size()), offsets.data()));
}

}  // namespace

PYBIND11_MODULE(_bpe_encoder, m) {
  m.doc() = "BLOOM's byte-level BPE encoder with Hugging Face tokenizers' ids (csrc/bpe/encoder.h)";
  py::class_<PyEncoder>(m, "Encoder")
      .def(py::init([](const std::vector<int32_t>& byte_ids,
                       py::array_t<uint32_t, py::array::c_style | py::array::forcecast> merges,
                       const std::vector<uint32_t>& excluded,
                       const std::vector<std::tuple<py::bytes, uint32_t, bool>>& added, bool ignore_merges,
                       const std::vector<std::pair<py::bytes, uint32_t>>& vocab, size_t cache_words) {
             return new PyEncoder(tables_of(byte_ids, merges, excluded, added, ignore_merges, vocab), cache_words);
           }),
           py::arg("byte_ids"), py::arg("merges"), py::arg("excluded"), py::arg("added"), py::arg("ignore_merges"),
           py::arg("vocab"), py::arg("cache_words"))
      .def("encode_batch", &encode_batch, py::arg("texts"), py::arg("append") = -1)
      .def_property_readonly("cached_words", [](const PyEncoder& e) { return e.encoder.cache().words(); })
      .def_property_readonly("memory", [](const PyEncoder& e) { return e.encoder.memory(); });
}
