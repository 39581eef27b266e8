// The QPSOCK_* variables this process started with, copied when the library
// loads. qpsock reads a setting from the live environment at first use and,
// when the program has removed it by then, from this copy: programs rewrite
// their own environment before their first socket (nginx's workers keep only
// TZ, daemons call clearenv()), and the settings the user gave must still
// apply there, as they do in every program it executes. A value the program
// sets itself before its first socket is taken as it is.
#pragma once

#include <cstddef>

namespace qpsock {

// Copies every QPSOCK_* assignment of environ into fixed storage, except the
// variable `not_a_setting` names (QPSOCK_INHERITED_STREAMS: a process's own
// inherited sockets, which each exec names anew); called once at load (tests
// call it again after changing their environment).
void capture_startup_settings(const char* not_a_setting = nullptr);

// The value of NAME (e.g. "QPSOCK_CONF"): the live environment's, else the
// one it had at load, else null.
const char* startup_setting(const char* name);

// The copied "NAME=value" strings, for handing on to executed programs.
size_t startup_setting_count();
char* startup_setting_assignment(size_t index);

}  // namespace qpsock
