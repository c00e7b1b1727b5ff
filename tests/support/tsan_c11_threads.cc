// ThreadSanitizer builds only (WALRELAY_TSAN): C11 threads for librdkafka that TSan can see.
//
// Debian's librdkafka starts its threads with glibc's thrd_create and locks with
// mtx_*/cnd_*. glibc implements those by calling its pthread functions internally, past
// TSan's interceptors: TSan never learns of librdkafka's threads and crashes (SEGV in
// its runtime on the first such thread), and would not see librdkafka's locks either.
// These definitions in the test program take precedence over glibc's (the shared library
// binds thrd_create & co. at load time) and call the intercepted pthread functions, with
// glibc's own type layouts (thrd_t is a pthread_t; mtx_t and cnd_t have the size and
// alignment of pthread_mutex_t and pthread_cond_t).
#include <pthread.h>
#include <threads.h>

#include <cerrno>
#include <cstdint>
#include <new>

namespace {

struct Start {
  thrd_start_t func;
  void* arg;
};

void* Trampoline(void* p) {
  Start s = *static_cast<Start*>(p);
  delete static_cast<Start*>(p);
  return reinterpret_cast<void*>(static_cast<intptr_t>(s.func(s.arg)));
}

int Result(int err) {
  if (err == 0) return thrd_success;
  if (err == ENOMEM) return thrd_nomem;
  if (err == ETIMEDOUT) return thrd_timedout;
  if (err == EBUSY) return thrd_busy;
  return thrd_error;
}

pthread_mutex_t* M(mtx_t* m) { return reinterpret_cast<pthread_mutex_t*>(m); }
pthread_cond_t* C(cnd_t* c) { return reinterpret_cast<pthread_cond_t*>(c); }

static_assert(sizeof(mtx_t) == sizeof(pthread_mutex_t));
static_assert(sizeof(cnd_t) == sizeof(pthread_cond_t));
static_assert(sizeof(thrd_t) == sizeof(pthread_t));

}  // namespace

extern "C" {

int thrd_create(thrd_t* thr, thrd_start_t func, void* arg) {
  auto* s = new (std::nothrow) Start{func, arg};
  if (s == nullptr) return thrd_nomem;
  pthread_t t;
  const int err = pthread_create(&t, nullptr, &Trampoline, s);
  if (err != 0) {
    delete s;
    return Result(err);
  }
  *thr = t;
  return thrd_success;
}

int thrd_join(thrd_t thr, int* res) {
  void* out = nullptr;
  const int err = pthread_join(thr, &out);
  if (err == 0 && res != nullptr) *res = static_cast<int>(reinterpret_cast<intptr_t>(out));
  return Result(err);
}

int thrd_detach(thrd_t thr) { return Result(pthread_detach(thr)); }

int mtx_init(mtx_t* m, int type) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  if (type & mtx_recursive) pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
  const int err = pthread_mutex_init(M(m), &a);
  pthread_mutexattr_destroy(&a);
  return Result(err);
}
int mtx_lock(mtx_t* m) { return Result(pthread_mutex_lock(M(m))); }
int mtx_trylock(mtx_t* m) { return Result(pthread_mutex_trylock(M(m))); }
int mtx_timedlock(mtx_t* m, const struct timespec* ts) {
  return Result(pthread_mutex_timedlock(M(m), ts));
}
int mtx_unlock(mtx_t* m) { return Result(pthread_mutex_unlock(M(m))); }
void mtx_destroy(mtx_t* m) { pthread_mutex_destroy(M(m)); }

int cnd_init(cnd_t* c) { return Result(pthread_cond_init(C(c), nullptr)); }
int cnd_signal(cnd_t* c) { return Result(pthread_cond_signal(C(c))); }
int cnd_broadcast(cnd_t* c) { return Result(pthread_cond_broadcast(C(c))); }
int cnd_wait(cnd_t* c, mtx_t* m) { return Result(pthread_cond_wait(C(c), M(m))); }
int cnd_timedwait(cnd_t* c, mtx_t* m, const struct timespec* ts) {
  return Result(pthread_cond_timedwait(C(c), M(m), ts));
}
void cnd_destroy(cnd_t* c) { pthread_cond_destroy(C(c)); }

}  // extern "C"
