"""The one-line machine description the benchmark reports start with."""
import os
import platform


def machine_line() -> str:
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024 ** 3
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "?"
    return (f"{platform.node()}: nproc {os.cpu_count()}, {mem_gib:.1f} GiB RAM, {cpu or platform.machine()}, "
            f"Linux {platform.release()}, Python {platform.python_version()}; load average at start {load}")
