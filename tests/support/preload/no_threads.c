// SPDX-License-Identifier: GPL-2.0-or-later
// Preloaded into bexd by tests of a daemon at its thread limit: pthread_create fails with EAGAIN,
// as when RLIMIT_NPROC or a pids cgroup limit is reached, while the file named by
// $BEXD_NO_THREADS_TRIGGER exists.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*CreateFn)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);

int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*start)(void*),
                   void* arg) {
  static CreateFn real;
  if (real == NULL) real = (CreateFn)dlsym(RTLD_NEXT, "pthread_create");
  const char* trigger = getenv("BEXD_NO_THREADS_TRIGGER");
  if (trigger != NULL && access(trigger, F_OK) == 0) return EAGAIN;
  return real(thread, attr, start, arg);
}
