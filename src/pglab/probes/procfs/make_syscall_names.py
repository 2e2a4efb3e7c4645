"""Regenerates syscall_names.py from the kernel's UAPI headers on this machine.

    python -m pglab.probes.procfs.make_syscall_names

/proc/<pid>/syscall gives a number; its name depends on the architecture. The numbers
come from the headers Debian's `linux-libc-dev` installs, run through the C
preprocessor (`cpp -dM`) so that every `#define __NR_x` is read as the compiler sees it:
- x86_64: `<asm/unistd_64.h>` (its own table);
- aarch64: `<asm-generic/unistd.h>`, the generic table arm64 uses, with the defines
  arm64's own `asm/unistd.h` sets (64-bit longs: `fcntl`, `lseek`, `newfstatat`... not
  their `64` variants; renameat, the old rlimit calls, clone3, memfd_secret).
Numbers that are a base rather than a call (`__NR_syscalls`,
`__NR_arch_specific_syscall`) are left out.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

HEADERS = Path("/usr/include")
X86_64: tuple[str, list[str]] = ("x86_64-linux-gnu/asm/unistd_64.h", [])
AARCH64: tuple[str, list[str]] = ("asm-generic/unistd.h", [
    "__BITS_PER_LONG=64", "__ARCH_WANT_RENAMEAT", "__ARCH_WANT_NEW_STAT",
    "__ARCH_WANT_SET_GET_RLIMIT", "__ARCH_WANT_TIME32_SYSCALLS", "__ARCH_WANT_SYS_CLONE3",
    "__ARCH_WANT_MEMFD_SECRET",
])
NOT_CALLS = {"syscalls", "arch_specific_syscall"}
DEFINE = re.compile(r"#define (__NR\w*) (.+)$")
OUT = Path(__file__).with_name("syscall_names.py")


def numbers(header: str, defines: list[str]) -> dict[int, str]:
    """Syscall number -> name, from the header's macros as the preprocessor sees them."""
    text = subprocess.run(
        ["cpp", "-dM", *(f"-D{d}" for d in defines), str(HEADERS / header)],
        check=True, capture_output=True, text=True).stdout
    macros: dict[str, str] = {}
    for line in text.splitlines():
        if define := DEFINE.match(line):
            macros[define[1]] = define[2]

    def value(expr: str) -> int | None:
        expr = expr.strip().strip("()")
        for _ in range(8):  # __NR_x -> __NR3264_x -> number, or base + offset
            if expr.isdigit():
                return int(expr)
            base, plus, offset = expr.partition("+")
            if plus and offset.strip().isdigit():
                inner = value(macros.get(base.strip(), base))
                return None if inner is None else inner + int(offset)
            if expr not in macros:
                return None
            expr = macros[expr].strip().strip("()")
        return None

    found: dict[int, str] = {}
    for macro, expr in macros.items():
        name = macro.removeprefix("__NR_")
        if not macro.startswith("__NR_") or name in NOT_CALLS:
            continue
        number = value(expr)
        if number is not None:
            found.setdefault(number, name)
    return dict(sorted(found.items()))


def render(tables: dict[str, dict[int, str]], source: str) -> str:
    lines = [
        '"""Syscall numbers -> names per architecture (generated: make_syscall_names.py).',
        "",
        f"Source: {source}.",
        '"""',
        "",
        "SYSCALL_NAMES: dict[str, dict[int, str]] = {",
    ]
    for arch, table in tables.items():
        lines.append(f'    "{arch}": {{')
        lines += [f'        {number}: "{name}",' for number, name in table.items()]
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> int:
    package = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}",
                              "linux-libc-dev"], capture_output=True, text=True).stdout
    tables = {"x86_64": numbers(*X86_64), "aarch64": numbers(*AARCH64)}
    OUT.write_text(render(tables, f"{package or 'kernel headers'} under {HEADERS}"))
    print(f"{OUT}: " + ", ".join(f"{arch} {len(t)} calls" for arch, t in tables.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
