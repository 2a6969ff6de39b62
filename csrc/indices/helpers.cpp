// Placeholder: the sample-index builders (document shuffle, sample index, sample shuffle, blend)
// are filled in by issue 3. Kept buildable so that `pip install -e .` always produces the module.
#include <pybind11/pybind11.h>

PYBIND11_MODULE(_index_helpers, m) {
    m.doc() = "bloomdata C++ index builders";
    m.attr("ABI_VERSION") = 0;
}
