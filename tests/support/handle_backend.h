/* Test support: a backend whose buffers are not host addresses, to prove that nothing but
 * buffers and the step descriptor crosses the backend seam (backend.h). */
#ifndef LLMM_TEST_HANDLE_BACKEND_H
#define LLMM_TEST_HANDLE_BACKEND_H

#include "backend/backend.h"

/* The handle backend: llmm__cpu_backend behind opaque buffer handles (see handle_backend.c). */
const llmm_backend_ops *handle_backend_ops(void);

/* Seam violations of the current process, over every state of this backend: ops that failed
 * because a pointer was not a handle this backend handed out (or a handle where host memory
 * is due), ops that read the step outside one, and buffers or weights still held at
 * shutdown. Tests assert it stays 0 across a run. */
unsigned long handle_backend_bad_pointers(void);

/* The same for one state (what init put in *state), for a test that drives the ops itself. */
unsigned long handle_backend_state_bad_pointers(const void *state);

#endif
