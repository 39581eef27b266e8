// The QPSOCK_* variables this process started with. qpsock reads its settings
// from this copy, taken when the library loads, not from the live environment:
// programs rewrite their own environment before their first socket (nginx's
// workers keep only TZ, daemons call clearenv()), and the settings the user
// gave must still apply there, as they do in every program it executes.
#pragma once

#include <cstddef>

namespace qpsock {

// Copies every QPSOCK_* assignment of environ into fixed storage; called once
// at load (tests call it again after changing their environment).
void capture_startup_settings();

// The value NAME (e.g. "QPSOCK_CONF") had at load, or null. Before the copy
// is taken (another library's constructor opening a socket before ours ran)
// the live environment answers.
const char* startup_setting(const char* name);

// The copied "NAME=value" strings, for handing on to executed programs.
size_t startup_setting_count();
char* startup_setting_assignment(size_t index);

}  // namespace qpsock
