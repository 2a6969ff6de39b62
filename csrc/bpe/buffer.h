// A growable array of plain data in its own pages (csrc/bpe: the merge learner and the word counter).
//
// On Linux an anonymous mapping that grows and shrinks in place (mremap), so growing never holds an old and a
// new copy at once (std::vector's doubling does: 2x at the peak), and `shrink` gives the pages back to the
// system (a freed std::vector's may stay with the allocator).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <type_traits>

#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace bloombpe {

// A growable array of plain data. Capacity grows by half; `shrink` gives back what a peak left behind.
template <typename T>
class Buffer {
  static_assert(std::is_trivially_copyable<T>::value, "a Buffer holds plain data");

 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& other) noexcept { take(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }
  ~Buffer() { release(); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& back() { return data_[size_ - 1]; }

  void push_back(const T& value) {
    if (size_ == capacity_) reallocate(grown(size_ + 1));
    data_[size_++] = value;
  }
  void pop_back() { --size_; }
  void clear() { size_ = 0; }
  // New elements are unspecified.
  void resize(size_t n) {
    if (n > capacity_) reallocate(grown(n));
    size_ = n;
  }
  void assign(size_t n, const T& value) {
    resize(n);
    std::fill(data_, data_ + n, value);
  }
  // Capacity down to max(size, keep) elements when it is more than twice that.
  void shrink(size_t keep = 0) {
    const size_t target = std::max(size_, keep);
    if (capacity_ > 2 * target) reallocate(target);
  }

 private:
  size_t grown(size_t need) const { return std::max({need, capacity_ + capacity_ / 2, size_t(16)}); }

  static size_t page_bytes(size_t bytes) {
#ifdef __linux__
    static const size_t page = size_t(sysconf(_SC_PAGESIZE));
    return (bytes + page - 1) / page * page;
#else
    return bytes;
#endif
  }

  void reallocate(size_t n) {
    const size_t old_bytes = page_bytes(capacity_ * sizeof(T)), bytes = page_bytes(n * sizeof(T));
    void* at = nullptr;
#ifdef __linux__
    if (bytes == 0) {
      if (data_ != nullptr) munmap(data_, old_bytes);
    } else if (data_ == nullptr) {
      at = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    } else {
      at = mremap(data_, old_bytes, bytes, MREMAP_MAYMOVE);  // moves page tables, copies nothing
    }
    if (at == MAP_FAILED) throw std::bad_alloc();
#else
    (void)old_bytes;
    if (bytes == 0) {
      std::free(data_);
    } else {
      at = std::realloc(data_, bytes);
      if (at == nullptr) throw std::bad_alloc();
    }
#endif
    data_ = static_cast<T*>(at);
    capacity_ = bytes / sizeof(T);
  }

  void release() {
    if (data_ != nullptr) reallocate(0);
    size_ = capacity_ = 0;
  }

  void take(Buffer& other) {
    data_ = other.data_;
    size_ = other.size_;
    capacity_ = other.capacity_;
    other.data_ = nullptr;
    other.size_ = other.capacity_ = 0;
  }

  T* data_ = nullptr;
  size_t size_ = 0, capacity_ = 0;
};

}  // namespace bloombpe
