// bloomdata._bpe_learner: the BPE merge learner of learner.h for Python (bloomdata/tokenizer/merges.py).
//
// learn(symbols, offsets, counts, vocab, vocab_size, min_frequency, progress=None, every=1000)
//   symbols: uint32[S], every word's symbol ids, merged in place (the caller gives it up);
//   offsets: int64[W + 1]; counts: uint64[W]; vocab: list of bytes (UTF-8 token strings, id order);
//   progress: called with the number of merges so far every `every` merges (with the GIL).
//   Returns (new tokens as bytes, in id order after the given vocab; uint32[M, 2] merges in order).
// The loop runs without the GIL.
//
// WordCounter(excluded=[]): the counting pass's word -> count table of word_counter.h
//   (bloomdata/tokenizer/word_counter.py). count_text(text): the pieces of BLOOM's split of one str (split.h,
//   breaking at the `excluded` code points), counted; returns how many.
//   add(blob, lengths, counts): words of a word-count
//   file's partition; take(partitions) -> (word_at uint64[P + 1], counts uint64[n], lengths uint32[n],
//   blob uint8[B]), grouped by xxh64 % P; len(), word_bytes, memory (bytes held); clear().
// xxh64(data: bytes) -> int: the partition hash, for the tests against the xxhash package.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <string_view>
#include <vector>

#include "learner.h"
#include "split.h"
#include "word_counter.h"
#include "xxh64.h"

namespace py = pybind11;

namespace {

py::tuple learn(py::array_t<uint32_t, py::array::c_style> symbols,
                py::array_t<int64_t, py::array::c_style | py::array::forcecast> offsets,
                py::array_t<uint64_t, py::array::c_style | py::array::forcecast> counts,
                const std::vector<py::bytes>& vocab, size_t vocab_size, uint64_t min_frequency,
                py::object progress, size_t every) {
  const size_t n = size_t(counts.size());
  if (size_t(offsets.size()) != n + 1) throw std::invalid_argument("offsets must have one more entry than counts");
  const int64_t* off = offsets.data();
  if (n > 0 && (off[0] != 0 || off[n] != int64_t(symbols.size())))
    throw std::invalid_argument("offsets must start at 0 and end at len(symbols)");
  for (size_t w = 0; w < n; ++w) {
    if (off[w + 1] < off[w]) throw std::invalid_argument("offsets must not decrease");
  }
  std::vector<std::string> tokens;
  tokens.reserve(vocab.size());
  for (const py::bytes& t : vocab) tokens.emplace_back(t);
  const uint32_t* s = symbols.data();
  for (py::ssize_t i = 0; i < symbols.size(); ++i) {
    if (s[i] >= tokens.size()) throw std::invalid_argument("a symbol id is not in vocab");
  }
  const size_t given = tokens.size();
  bloombpe::Learner learner(bloombpe::Words{symbols.mutable_data(), off, counts.data(), n}, std::move(tokens),
                            vocab_size, min_frequency);
  {
    py::gil_scoped_release release;
    learner.run(
        [&](size_t done) {
          if (progress.is_none()) return;
          py::gil_scoped_acquire acquire;
          progress(done);
        },
        every == 0 ? 1 : every);
  }
  py::list added;
  for (size_t i = given; i < learner.vocab().size(); ++i) added.append(py::bytes(learner.vocab()[i]));
  const auto& merges = learner.merges();
  py::array_t<uint32_t> pairs({py::ssize_t(merges.size()), py::ssize_t(2)});
  auto out = pairs.mutable_unchecked<2>();
  for (size_t i = 0; i < merges.size(); ++i) {
    out(i, 0) = merges[i].first;
    out(i, 1) = merges[i].second;
  }
  return py::make_tuple(added, pairs);
}

// The counter and the split it counts with.
struct Counter {
  explicit Counter(const std::vector<uint32_t>& excluded) : split(excluded) {}
  bloombpe::WordCounter words;
  bloombpe::Excluded split;
};

size_t count_text(Counter& counter, const py::handle& text) {
  if (!PyUnicode_Check(text.ptr()))
    throw py::type_error("WordCounter takes str, not " + std::string(Py_TYPE(text.ptr())->tp_name));
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(text.ptr(), &n);  // ASCII: the str's own bytes, no copy
  if (p == nullptr) throw py::error_already_set();
  size_t pieces = 0;
  bloombpe::split_pieces(p, size_t(n), counter.split, [&](size_t start, size_t length) {
    counter.words.add(p + start, length, 1);
    ++pieces;
  });
  return pieces;
}

void add(Counter& counter, const py::buffer& blob,
         py::array_t<uint32_t, py::array::c_style | py::array::forcecast> lengths,
         py::array_t<uint64_t, py::array::c_style | py::array::forcecast> counts) {
  const py::buffer_info bytes = blob.request();
  if (bytes.itemsize != 1 || bytes.ndim != 1) throw std::invalid_argument("blob must be 1-D bytes");
  if (lengths.size() != counts.size()) throw std::invalid_argument("lengths and counts differ in size");
  const char* p = static_cast<const char*>(bytes.ptr);
  const uint32_t* len = lengths.data();
  const uint64_t* c = counts.data();
  size_t at = 0;
  for (py::ssize_t i = 0; i < lengths.size(); ++i) {
    if (at + len[i] > size_t(bytes.size)) throw std::invalid_argument("lengths run past the blob");
    counter.words.add(p + at, len[i], c[i]);
    at += len[i];
  }
  if (at != size_t(bytes.size)) throw std::invalid_argument("lengths do not cover the blob");
}

py::tuple take(const Counter& counter, size_t partitions) {
  if (partitions == 0) throw std::invalid_argument("partitions must be at least 1");
  const auto& words = counter.words;
  const auto n = py::ssize_t(words.words());
  py::array_t<uint64_t> word_at(py::ssize_t(partitions + 1)), counts(n);
  py::array_t<uint32_t> lengths(n);
  py::array_t<uint8_t> blob(py::ssize_t(words.word_bytes()));
  words.take(partitions, word_at.mutable_data(), counts.mutable_data(), lengths.mutable_data(),
             reinterpret_cast<char*>(blob.mutable_data()));
  return py::make_tuple(word_at, counts, lengths, blob);
}

}  // namespace

PYBIND11_MODULE(_bpe_learner, m) {
  m.doc() = "Hugging Face BpeTrainer's merge loop over word counts (csrc/bpe/learner.h) and the word counter";
  m.def("learn", &learn, py::arg("symbols"), py::arg("offsets"), py::arg("counts"), py::arg("vocab"),
        py::arg("vocab_size"), py::arg("min_frequency"), py::arg("progress") = py::none(),
        py::arg("every") = 1000);
  py::class_<Counter>(m, "WordCounter")
      .def(py::init<const std::vector<uint32_t>&>(), py::arg("excluded") = std::vector<uint32_t>())
      .def("count_text", &count_text, py::arg("text"))
      .def("add", &add, py::arg("blob"), py::arg("lengths"), py::arg("counts"))
      .def("take", &take, py::arg("partitions"))
      .def("clear", [](Counter& c) { c.words.clear(); })
      .def("__len__", [](const Counter& c) { return c.words.words(); })
      .def_property_readonly("word_bytes", [](const Counter& c) { return c.words.word_bytes(); })
      .def_property_readonly("memory", [](const Counter& c) { return c.words.memory(); });
  m.def("xxh64", [](const py::bytes& data) {
    const std::string_view s(data);
    return bloombpe::xxh64(s.data(), s.size());
  });
}
