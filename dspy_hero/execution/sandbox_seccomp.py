"""The seccomp filter every strong layer puts on a run: no new user namespaces, no AF_VSOCK.

A user namespace would hand the program every capability inside it (mounts, raw sockets, ...), and
AF_VSOCK reaches a virtual machine's host past any network namespace. The filter (classic BPF, for
x86_64 and aarch64) answers ``unshare``/``clone`` with CLONE_NEWUSER with EPERM, ``clone3`` (whose
flags a filter cannot read) with ENOSYS, so glibc falls back to ``clone``, and ``socket(AF_VSOCK)``
with EAFNOSUPPORT; everything else is allowed. It is built once here as the kernel's raw
``sock_filter`` array: bwrap reads it from a file descriptor (``--seccomp``), the rlimit layer's
boot installs it with prctl after dropping root (no_new_privs is set first, so it cannot be lifted).
"""

from __future__ import annotations

import os
import struct

__all__ = ["seccomp_program"]

_ARCHES = {  # machine -> (AUDIT_ARCH, syscall numbers)
    "x86_64": (0xC000003E, {"socket": 41, "clone": 56, "unshare": 272, "clone3": 435}),
    "aarch64": (0xC00000B7, {"socket": 198, "clone": 220, "unshare": 97, "clone3": 435}),
}
_LD_W_ABS, _JEQ, _JSET, _RET = 0x20, 0x15, 0x45, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS, _EAFNOSUPPORT = 1, 38, 97
_CLONE_NEWUSER, _AF_VSOCK = 0x10000000, 40


def seccomp_program(machine: str | None = None) -> bytes | None:
    """The filter as raw bytes for this machine's architecture; None where it is not known."""
    machine = machine or os.uname().machine
    if machine == "arm64":
        machine = "aarch64"
    if machine not in _ARCHES:
        return None
    audit_arch, nr = _ARCHES[machine]
    prog = [
        (_LD_W_ABS, 0, 0, 4), (_JEQ, 1, 0, audit_arch), (_RET, 0, 0, _ALLOW),  # another ABI: leave it
        (_LD_W_ABS, 0, 0, 0),  # the syscall number
        (_JEQ, 0, 4, nr["socket"]), (_LD_W_ABS, 0, 0, 16), (_JEQ, 0, 1, _AF_VSOCK),
        (_RET, 0, 0, _ERRNO | _EAFNOSUPPORT), (_RET, 0, 0, _ALLOW),
        (_JEQ, 1, 0, nr["clone"]), (_JEQ, 0, 4, nr["unshare"]),
        (_LD_W_ABS, 0, 0, 16), (_JSET, 0, 1, _CLONE_NEWUSER), (_RET, 0, 0, _ERRNO | _EPERM), (_RET, 0, 0, _ALLOW),
        (_JEQ, 0, 1, nr["clone3"]), (_RET, 0, 0, _ERRNO | _ENOSYS),
        (_RET, 0, 0, _ALLOW),
    ]
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)
