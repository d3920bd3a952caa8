//! The `.init_array` hook that every binary linking this library carries (the agent,
//! `bench-exec`, test harnesses): when `argv[1]` is the sandbox helper's hidden argument
//! ([`super::helper::HELPER_ARG`]) or the spawner's ([`super::spawner::SPAWNER_ARG`]), the
//! process runs that and exits before `main`; any other process returns from the hook at once.

use std::ffi::{CStr, c_char, c_int};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by the hook in every process that carries it.
static HOOK_RAN: AtomicBool = AtomicBool::new(false);

/// glibc calls `.init_array` entries of the executable with `argc`, `argv` and `envp`.
type InitFn = extern "C" fn(c_int, *const *const c_char, *const *const c_char);

#[used]
#[unsafe(link_section = ".init_array")]
static HOOK: InitFn = hook;

extern "C" fn hook(argc: c_int, argv: *const *const c_char, _envp: *const *const c_char) {
    HOOK_RAN.store(true, Ordering::Relaxed);
    if argc < 2 || argv.is_null() {
        return;
    }
    // SAFETY: glibc passes the process's own argc/argv, valid NUL-terminated strings.
    let args: Vec<Vec<u8>> = unsafe {
        let first = *argv.add(1);
        if first.is_null() {
            return;
        }
        let first = CStr::from_ptr(first).to_bytes();
        if first == super::spawner::SPAWNER_ARG.as_bytes() {
            // The command spawner, exec'd once per spawner by the executor.
            libc::_exit(super::spawner::main());
        }
        if first != super::helper::HELPER_ARG.as_bytes() {
            return;
        }
        (0..argc as usize)
            .map(|i| CStr::from_ptr(*argv.add(i)).to_bytes().to_vec())
            .collect()
    };
    let code = super::helper::main(&args, super::helper::Namespaces::Make(None));
    // SAFETY: ends the helper without running the host program's `main`.
    unsafe { libc::_exit(code) }
}

/// Whether this binary carries the helper and the spawner (the hook ran at start-up). Referencing the hook
/// here also keeps the linker from dropping it from binaries that use the executor.
pub(crate) fn available() -> bool {
    std::hint::black_box(&HOOK);
    HOOK_RAN.load(Ordering::Relaxed)
}
