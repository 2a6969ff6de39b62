// bloomdata._bpe_learner: the BPE merge learner of learner.h for Python (bloomdata/tokenizer/merges.py).
//
// learn(symbols, offsets, counts, vocab, vocab_size, min_frequency, progress=None, every=1000)
//   symbols: uint32[S], every word's symbol ids, merged in place (the caller gives it up);
//   offsets: int64[W + 1]; counts: uint64[W]; vocab: list of bytes (UTF-8 token strings, id order);
//   progress: called with the number of merges so far every `every` merges (with the GIL).
//   Returns (new tokens as bytes, in id order after the given vocab; uint32[M, 2] merges in order).
// The loop runs without the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "learner.h"

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

}  // namespace

PYBIND11_MODULE(_bpe_learner, m) {
  m.doc() = "Hugging Face BpeTrainer's merge loop over word counts (csrc/bpe/learner.h)";
  m.def("learn", &learn, py::arg("symbols"), py::arg("offsets"), py::arg("counts"), py::arg("vocab"),
        py::arg("vocab_size"), py::arg("min_frequency"), py::arg("progress") = py::none(),
        py::arg("every") = 1000);
}
