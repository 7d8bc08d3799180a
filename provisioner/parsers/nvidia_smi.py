"""Reading nvidia-smi's outputs: every form it prints (CSV query, XML, the plain table,
-q, -L, --version, topo -m, nvlink -s) and its failure messages.

Each GPU listing becomes the same `GpuReport`, so one judge (provisioner/verify.py)
applies whichever form a host or a fixture gave. Fields a form does not carry are None.
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_mib: int | None = None
    persistence: bool | None = None
    ecc: bool | None = None
    mig: bool | None = None
    bus_id: str | None = None


@dataclass(frozen=True)
class GpuReport:
    source: str
    gpus: list[Gpu]
    driver: str | None = None
    cuda: str | None = None  # the newest CUDA the loaded driver supports
    mig_devices: int = 0
    processes: int | None = None


@dataclass(frozen=True)
class Failure:
    cause: str
    fix: str


# Order matters: the first pattern that matches names the cause.
FAILURES = [
    (r"couldn't communicate with the NVIDIA driver",
     Failure("no GPU present, or the NVIDIA driver is not loaded",
             "on a GPU host: check `lsmod | grep nvidia` and `dkms status`, then reboot into the kernel the module "
             "was built for")),
    (r"Driver/library version mismatch",
     Failure("driver/library version mismatch: the loaded kernel module is older than the installed libraries",
             "reboot the host (or unload and reload the nvidia modules) so the new driver is loaded")),
    (r"No devices were found",
     Failure("no devices found: the driver is loaded but sees no GPU",
             "check `dmesg | grep -i nvrm` for a GPU that fell off the bus or that this driver does not support")),
    (r"Unable to determine the device handle|GPU is lost|Unknown Error",
     Failure("GPU lost: the driver cannot talk to a GPU",
             "read `dmesg | grep -i xid`; a GPU lost to Xid 79 needs a reset or reboot, repeated loss an RMA")),
    (r"couldn't find libnvidia-ml\.so",
     Failure("NVML library not found: the driver's user-space libraries are missing",
             "reinstall the driver packages (provision up) or fix ldconfig for libnvidia-ml.so")),
]


def classify(output: str) -> Failure | None:
    for pattern, failure in FAILURES:
        if re.search(pattern, output):
            return failure
    return None


def _int(text: str | None) -> int | None:
    match = re.search(r"\d+", text or "")
    return int(match.group()) if match else None


def _flag(text: str | None) -> bool | None:
    value = (text or "").strip().lower()
    return {"enabled": True, "on": True, "disabled": False, "off": False}.get(value)


# --- GPU listings ----------------------------------------------------------------------

def read_csv(text: str) -> GpuReport:
    """`--query-gpu=... --format=csv[,nounits]` with its header; any columns, any order."""
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    header = [column.split(" [")[0].strip() for column in rows[0]] if rows else []
    cells = [dict(zip(header, (v.strip() for v in row))) for row in rows[1:] if row]
    gpus = [Gpu(name=c.get("name", ""), memory_mib=_int(c.get("memory.total")),
                persistence=_flag(c.get("persistence_mode")), ecc=_flag(c.get("ecc.mode.current")),
                mig=_flag(c.get("mig.mode.current")), bus_id=c.get("pci.bus_id")) for c in cells]
    driver = cells[0].get("driver_version") if cells else None
    return GpuReport("csv", gpus, driver=driver)


def read_processes_csv(text: str) -> int:
    """`--query-compute-apps=...`: how many compute processes hold a GPU."""
    rows = [row for row in csv.reader(io.StringIO(text.strip()), skipinitialspace=True) if row]
    return max(len(rows) - 1, 0)


def read_xml(text: str) -> GpuReport:
    """`nvidia-smi -q -x`."""
    root = ET.fromstring(text)
    gpus = []
    mig_devices = 0
    for gpu in root.findall("gpu"):
        mig_devices += len(gpu.findall("mig_devices/mig_device"))
        gpus.append(Gpu(
            name=(gpu.findtext("product_name") or "").strip(),
            memory_mib=_int(gpu.findtext("fb_memory_usage/total")),
            persistence=_flag(gpu.findtext("persistence_mode")),
            ecc=_flag(gpu.findtext("ecc_mode/current_ecc")),
            mig=_flag(gpu.findtext("mig_mode/current_mig")),
            bus_id=gpu.get("id"),
        ))
    processes = len(root.findall("gpu/processes/process_info"))
    return GpuReport("xml", gpus, driver=root.findtext("driver_version"), cuda=root.findtext("cuda_version"),
                     mig_devices=mig_devices, processes=processes)


_TABLE_HEAD = re.compile(r"Driver Version:\s*(\S+)\s+CUDA Version:\s*(\S+)")
_TABLE_GPU = re.compile(r"^\|\s+(\d+)\s+(.+?)\s+(On|Off)\s+\|\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s+"
                        r"(?:On|Off)\s+\|\s+(\S+)\s+\|")
_TABLE_MEM = re.compile(r"(\d+)MiB\s*/\s*(\d+)MiB")
_TABLE_PROC = re.compile(r"^\|\s+\d+\s+(?:\S+\s+\S+\s+)?\d+\s+[CG+]{1,3}\s+")


def read_table(text: str) -> GpuReport:
    """Plain `nvidia-smi` (old narrow and new wide layouts)."""
    lines = text.splitlines()
    head = next((m for m in map(_TABLE_HEAD.search, lines) if m), None)
    gpus: list[Gpu] = []
    in_processes = False
    processes = 0
    for i, line in enumerate(lines):
        if "Processes:" in line:
            in_processes = True
        if in_processes:
            processes += bool(_TABLE_PROC.match(line))
            continue
        match = _TABLE_GPU.match(line)
        if not match:
            continue
        memory = _TABLE_MEM.search(lines[i + 1]) if i + 1 < len(lines) else None
        mig_cell = lines[i + 2].rstrip(" |").split()[-1] if i + 2 < len(lines) and lines[i + 2].startswith("|") else ""
        ecc_cell = match.group(5)
        gpus.append(Gpu(
            name=match.group(2).strip(),
            memory_mib=int(memory.group(2)) if memory else None,
            persistence=match.group(3) == "On",
            ecc=None if ecc_cell == "N/A" else True,  # a count of errors means ECC is on
            mig=_flag(mig_cell),
            bus_id=match.group(4),
        ))
    return GpuReport("table", gpus, driver=head.group(1) if head else None, cuda=head.group(2) if head else None,
                     processes=processes)


def read_q(text: str) -> GpuReport:
    """`nvidia-smi -q` (text)."""
    top = dict(re.findall(r"^(Driver Version|CUDA Version)\s*:\s*(\S+)", text, re.M))
    gpus = []
    for block in re.split(r"^GPU [0-9A-Fa-f:.]+$", text, flags=re.M)[1:]:
        def value(label: str, scope: str = block) -> str | None:
            match = re.search(rf"^\s*{label}\s*:\s*(.+)$", scope, re.M)
            return match.group(1).strip() if match else None

        memory = re.search(r"FB Memory Usage\s*\n\s*Total\s*:\s*(\d+)", block)
        mig = re.search(r"MIG Mode\s*\n\s*Current\s*:\s*(\S+)", block)
        ecc = re.search(r"ECC Mode\s*\n\s*Current\s*:\s*(\S+)", block)
        gpus.append(Gpu(name=value("Product Name") or "", memory_mib=int(memory.group(1)) if memory else None,
                        persistence=_flag(value("Persistence Mode")), ecc=_flag(ecc.group(1)) if ecc else None,
                        mig=_flag(mig.group(1)) if mig else None))
    return GpuReport("q", gpus, driver=top.get("Driver Version"), cuda=top.get("CUDA Version"))


def read_list(text: str) -> GpuReport:
    """`nvidia-smi -L`: GPUs and, indented under them, their MIG devices."""
    gpus = [Gpu(name=m.group(1).strip()) for m in re.finditer(r"^GPU \d+: (.+?) \(UUID:", text, re.M)]
    mig = len(re.findall(r"^\s+MIG \S+\s+Device\s+\d+:", text, re.M))
    gpus = [Gpu(name=g.name, mig=True if mig else None) for g in gpus]
    return GpuReport("list", gpus, mig_devices=mig)


def read_version(text: str) -> GpuReport:
    """`nvidia-smi --version`: versions only, no GPUs."""
    fields = dict(re.findall(r"^(\w[\w ]*?)\s*:\s*(\S+)\s*$", text, re.M))
    return GpuReport("version", [], driver=fields.get("DRIVER version"), cuda=fields.get("CUDA Version"))


def read(text: str) -> GpuReport:
    """Any GPU listing nvidia-smi prints, recognised by its shape."""
    stripped = text.lstrip()
    if stripped.startswith("<?xml") or stripped.startswith("<nvidia_smi_log"):
        return read_xml(text)
    if "NVIDIA-SMI version" in text:
        return read_version(text)
    if re.search(r"^GPU \d+: .+\(UUID:", text, re.M):
        return read_list(text)
    if "Attached GPUs" in text:
        return read_q(text)
    if "Driver Version:" in text:
        return read_table(text)
    return read_csv(text)


# --- topology ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Topology:
    gpus: int
    links: dict[tuple[int, int], str] = field(default_factory=dict)  # (0, 1) -> "NV18", "PXB", ...

    def nvlinked_pairs(self) -> int:
        return sum(1 for kind in self.links.values() if kind.startswith("NV"))


def read_topo(text: str) -> Topology:
    """`nvidia-smi topo -m`: how every pair of GPUs is connected."""
    # The header is underlined with ANSI escapes; text copied from web pages keeps "[4m" without the ESC.
    clean = re.sub(r"\x1b?\[[0-9;]*m", "", text)
    rows = [line.split("\t") for line in clean.splitlines() if re.match(r"^GPU\d+\t", line)]
    header = next((line.split("\t") for line in clean.splitlines() if line.startswith("\tGPU0")), [])
    columns = [c.strip() for c in header]
    gpu_columns = [i for i, c in enumerate(columns) if re.fullmatch(r"GPU\d+", c)]
    links = {}
    for row in rows:
        a = int(row[0][3:])
        for col in gpu_columns:
            if col < len(row):
                b = int(columns[col][3:])
                if a < b:
                    links[(a, b)] = row[col].strip()
    return Topology(len(rows), links)


def read_nvlink_status(text: str) -> dict[int, list[float | None]]:
    """`nvidia-smi nvlink -s`: per GPU, each link's speed in GB/s (None when inactive)."""
    out: dict[int, list[float | None]] = {}
    current = None
    for line in text.splitlines():
        gpu = re.match(r"^GPU (\d+):", line)
        if gpu:
            current = out.setdefault(int(gpu.group(1)), [])
            continue
        link = re.match(r"^\s+Link \d+:\s*(.+)$", line)
        if link and current is not None:
            speed = re.match(r"([\d.]+) GB/s", link.group(1).strip())
            current.append(float(speed.group(1)) if speed else None)
    return out
