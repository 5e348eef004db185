/* Helpers shared by the Check suites of tests/unit: running a suite, reading and writing small
 * files, setting a parameter, a private parameter environment per test, a one-rank communicator.
 * They use Check's asserts, so call them from a test (or its fixture), not from a forked rank. */
#ifndef BATON_TEST_UNIT_H
#define BATON_TEST_UNIT_H

#include <check.h>
#include <stddef.h>

#include "nccl.h"

/* Runs every test of s (the runner takes s over) and frees the runner; EXIT_SUCCESS when no
 * test failed, EXIT_FAILURE otherwise: main's return value. */
int unit_run_suite(Suite* s);

/* The whole file as a NUL-terminated string to free(), NULL when it cannot be opened. */
char* unit_read_file(const char* path);
/* Creates (or truncates) path holding text; fails the test when it cannot. */
void unit_write_file(const char* path, const char* text);
/* How many times needle occurs in text, not overlapping. */
int unit_count(const char* text, const char* needle);

/* setenv(name, value), or unsetenv(name) for a NULL value, then param_reload(). */
void unit_set_param(const char* name, const char* value);

/* A private environment for one test: dir_template ("/tmp/<name>_XXXXXX") becomes a fresh
 * directory (written back in place); every NCCL_* row of the parameter table is unset; $HOME and
 * the system conf file point into the directory (<dir>/.nccl.conf, <dir>/etc_nccl.conf, absent
 * until the test writes them); logging and the thread's last error start afresh. */
void unit_sandbox_enter(char* dir_template);
/* Undoes unit_sandbox_enter: resets logging (closing a log file in the directory) and removes the
 * directory with everything in it. */
void unit_sandbox_leave(const char* dir);

/* A communicator of one rank; fails the test when ncclGetUniqueId or ncclCommInitRank fails. */
ncclComm_t unit_one_rank_comm(void);

#endif /* BATON_TEST_UNIT_H */
