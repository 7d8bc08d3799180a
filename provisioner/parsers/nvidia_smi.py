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


class Unreadable(ValueError):
    """A reader met text it cannot read: the check it feeds fails, naming the reader and the text."""

    def __init__(self, reader: str, text: str, why: str = ""):
        self.reader, self.text, self.why = reader, text, why
        super().__init__(f"{reader} could not read {snippet(text)!r}" + (f": {why}" if why else ""))


def snippet(text: str, limit: int = 160) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


@dataclass(frozen=True)
class Health:
    """What -q -x says about one GPU's health; None where the form or the GPU does not say."""
    ecc_uncorrectable: int | None = None  # volatile (since the driver loaded), DRAM + SRAM
    ecc_correctable: int | None = None
    ecc_uncorrectable_aggregate: int | None = None  # lifetime
    retired_sbe: int | None = None  # pages retired for multiple single-bit errors (before Ampere)
    retired_dbe: int | None = None  # pages retired for a double-bit error (before Ampere)
    retired_pending: bool | None = None
    remap_pending: bool | None = None  # row remapping (Ampere and later)
    remap_failure: bool | None = None
    remap_uncorrectable: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    utilization: int | None = None  # percent
    clock_reasons: tuple[str, ...] | None = None  # the active clocks-event (throttle) reasons, short names
    fabric_state: str | None = None  # NVSwitch / Blackwell: "Completed" when the GPU joined the fabric
    fabric_status: str | None = None
    architecture: str | None = None
    recovery_action: str | None = None


@dataclass(frozen=True)
class Gpu:
    """One GPU as a capture shows it. None: the capture does not carry that reading (a CSV without
    the column, -L, a cut paste); a reading nvidia-smi prints as N/A is a value (ECC/MIG N/A: the
    GPU has none, so it is not on)."""
    name: str
    memory_mib: int | None = None
    persistence: bool | None = None
    ecc: bool | None = None
    mig: bool | None = None
    bus_id: str | None = None
    health: Health | None = None


@dataclass(frozen=True)
class GpuReport:
    source: str
    gpus: list[Gpu]
    driver: str | None = None
    cuda: str | None = None  # the newest CUDA the loaded driver supports
    mig_devices: int = 0
    processes: int | None = None
    cuda_note: str | None = None  # "N/A" / "Not Found": the driver printed no CUDA version (libcuda missing)
    errors: tuple[str, ...] = ()  # cells nvidia-smi could not read (ERR!), one line each


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
    (r"Unable to determine the device handle|GPU is lost",
     Failure("GPU lost: the driver cannot talk to a GPU",
             "read `dmesg | grep -i xid`; a GPU lost to Xid 79 needs a reset or reboot, repeated loss an RMA")),
    # Inside a container this is the device nodes or the cgroup device rules, not a lost GPU:
    # e.g. after `systemctl daemon-reload` on the host (NVIDIA/nvidia-container-toolkit#1227).
    (r"Failed to initialize NVML: Unknown Error",
     Failure("NVML cannot open the GPU devices: a device-access or cgroup problem (in a container: the container "
             "lost access to /dev/nvidia*), not a lost GPU",
             "on the host run nvidia-smi; if it works there, restart the container (or fix its device cgroup / "
             "the nvidia-container-toolkit's systemd cgroup setting)")),
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


def _version(text: str | None) -> tuple[str | None, str | None]:
    """A version cell: ("12.4", None), or (None, "N/A") for N/A, Not Found, ERR! and the like."""
    value = (text or "").strip()
    if re.fullmatch(r"\d+(\.\d+)+", value):
        return value, None
    return None, value or None


def _flag(text: str | None) -> bool | None:
    value = (text or "").strip().lower()
    return {"enabled": True, "on": True, "disabled": False, "off": False}.get(value)


_NOT_SUPPORTED = {"n/a", "[n/a]", "not supported", "[not supported]"}


def _mode(text: str | None) -> bool | None:
    """ECC or MIG mode: Enabled/Disabled, and N/A (a GPU without the feature: not on); None only
    when the capture has no such reading."""
    if text is not None and text.strip().lower() in _NOT_SUPPORTED:
        return False
    return _flag(text)


def _count(text: str | None) -> int | None:
    """A counter cell: "0", "2"; None for N/A, [N/A], ERR! and absent cells."""
    value = (text or "").strip()
    return int(value) if re.fullmatch(r"\d+", value) else None


# --- GPU listings ----------------------------------------------------------------------

CSV_COLUMNS = {"name", "memory.total", "driver_version", "persistence_mode", "ecc.mode.current", "pci.bus_id",
               "mig.mode.current", "index", "uuid", "gpu_name"}


def _csv_health(c: dict[str, str]) -> Health | None:
    """What the exporter-style --query-gpu columns say about health (None: no such column at all)."""
    if not any(k.startswith(("ecc.errors.", "retired_pages.", "remapped_rows.", "pcie.link.", "clocks_event_reasons.",
                             "clocks_throttle_reasons.", "fabric.")) for k in c):
        return None

    def total(*keys: str) -> int | None:
        found = [v for v in (_count(c.get(k)) for k in keys) if v is not None]
        return sum(found) if found else None

    reasons = {k.split(".", 1)[1]: v for k, v in c.items()
               if k.startswith(("clocks_event_reasons.", "clocks_throttle_reasons."))
               and k.split(".", 1)[1] not in ("supported", "active")}
    return Health(
        ecc_uncorrectable=total("ecc.errors.uncorrected.volatile.total"),
        ecc_correctable=total("ecc.errors.corrected.volatile.total"),
        ecc_uncorrectable_aggregate=total("ecc.errors.uncorrected.aggregate.total"),
        retired_sbe=_count(c.get("retired_pages.single_bit_ecc.count")),
        retired_dbe=_count(c.get("retired_pages.double_bit.count")),
        retired_pending=_yes(c.get("retired_pages.pending")),
        remap_pending=_yes(c.get("remapped_rows.pending")), remap_failure=_yes(c.get("remapped_rows.failure")),
        remap_uncorrectable=_count(c.get("remapped_rows.uncorrectable")),
        pcie_width=_count(c.get("pcie.link.width.current")), pcie_width_max=_count(c.get("pcie.link.width.max")),
        pcie_gen=_count(c.get("pcie.link.gen.gpucurrent") or c.get("pcie.link.gen.current")),
        pcie_gen_max=_count(c.get("pcie.link.gen.gpumax") or c.get("pcie.link.gen.max")),
        utilization=_int(c.get("utilization.gpu")),
        clock_reasons=tuple(sorted(r for r, v in reasons.items() if v == "Active")) if reasons else None,
        fabric_state=_x_value(c.get("fabric.state")), fabric_status=_x_value(c.get("fabric.status")),
        recovery_action=_x_value(c.get("gpu_recovery_action")))


def _x_value(text: str | None) -> str | None:
    value = (text or "").strip()
    return None if not value or value.lower() in _NOT_SUPPORTED else value


def read_csv(text: str) -> GpuReport:
    """`--query-gpu=... --format=csv[,nounits]` with its header; any columns, any order."""
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    header = [column.split(" [")[0].strip() for column in rows[0]] if rows else []
    if not set(header) & CSV_COLUMNS:
        raise Unreadable("nvidia-smi CSV reader", text, "no known --query-gpu column in the first line")
    cells = [dict(zip(header, (v.strip() for v in row))) for row in rows[1:] if row]
    errors = tuple(f"GPU {i}: {k} is {v}" for i, c in enumerate(cells) for k, v in c.items()
                   if v in ("ERR!", "[Unknown Error]", "[GPU is lost]"))
    gpus = [Gpu(name=c.get("name") or c.get("gpu_name", ""), memory_mib=_int(c.get("memory.total")),
                persistence=_flag(c.get("persistence_mode")), ecc=_mode(c.get("ecc.mode.current")),
                mig=_mode(c.get("mig.mode.current")), bus_id=c.get("pci.bus_id"), health=_csv_health(c))
            for c in cells]
    # R610 adds kmd_version (driver_version is deprecated there, still printed)
    driver = _version(cells[0].get("kmd_version") or cells[0].get("driver_version"))[0] if cells else None
    return GpuReport("csv", gpus, driver=driver, errors=errors)


def read_processes_csv(text: str) -> int:
    """`--query-compute-apps=...`: how many compute processes hold a GPU."""
    rows = [row for row in csv.reader(io.StringIO(text.strip()), skipinitialspace=True) if row]
    return max(len(rows) - 1, 0)


def _x(node: ET.Element | None, *paths: str) -> str | None:
    """The first of `paths` under node that holds a value (not N/A); old and new element names alike."""
    if node is None:
        return None
    for path in paths:
        value = node.findtext(path)
        if value is not None and value.strip() and value.strip() not in ("N/A", "Not Supported"):
            return value.strip()
    return None


def _sum(node: ET.Element | None, *paths: str) -> int | None:
    values = [_int(_x(node, p)) for p in paths]
    found = [v for v in values if v is not None]
    return sum(found) if found else None


def _yes(text: str | None) -> bool | None:
    value = (text or "").strip().lower()
    return {"yes": True, "no": False}.get(value)


def _health(gpu: ET.Element) -> Health:
    ecc = gpu.find("ecc_errors")
    vol = ecc.find("volatile") if ecc is not None else None
    agg = ecc.find("aggregate") if ecc is not None else None
    # Before Ampere: single_bit/double_bit totals; Ampere and later: dram_/sram_ counters
    # (R590 splits sram_uncorrectable into _parity and _secded).
    unc_paths = ("double_bit/total", "dram_uncorrectable", "sram_uncorrectable", "sram_uncorrectable_parity",
                 "sram_uncorrectable_secded")
    cor_paths = ("single_bit/total", "dram_correctable", "sram_correctable")
    reasons = gpu.find("clocks_event_reasons")
    if reasons is None:
        reasons = gpu.find("clocks_throttle_reasons")
    active = None if reasons is None else tuple(sorted(
        re.sub(r"^clocks_(?:event|throttle)_reason_", "", child.tag) for child in reasons
        if (child.text or "").strip() == "Active"))
    link = gpu.find("pci/pci_gpu_link_info")
    retired = gpu.find("retired_pages")
    remap = gpu.find("remapped_rows")
    return Health(
        ecc_uncorrectable=_sum(vol, *unc_paths), ecc_correctable=_sum(vol, *cor_paths),
        ecc_uncorrectable_aggregate=_sum(agg, *unc_paths),
        retired_sbe=_int(_x(retired, "multiple_single_bit_retirement/retired_count")),
        retired_dbe=_int(_x(retired, "double_bit_retirement/retired_count")),
        retired_pending=_yes(_x(retired, "pending_retirement", "pending_blacklist")),
        remap_pending=_yes(_x(remap, "remapped_row_pending")), remap_failure=_yes(_x(remap, "remapped_row_failure")),
        remap_uncorrectable=_int(_x(remap, "remapped_row_unc")),
        pcie_width=_int(_x(link, "link_widths/current_link_width")),
        pcie_width_max=_int(_x(link, "link_widths/max_link_width")),
        pcie_gen=_int(_x(link, "pcie_gen/current_link_gen")), pcie_gen_max=_int(_x(link, "pcie_gen/max_link_gen")),
        utilization=_int(_x(gpu, "utilization/gpu_util")), clock_reasons=active,
        fabric_state=_x(gpu, "fabric/state"), fabric_status=_x(gpu, "fabric/status"),
        architecture=_x(gpu, "product_architecture"), recovery_action=_x(gpu, "gpu_recovery_action"))


def read_xml(text: str) -> GpuReport:
    """`nvidia-smi -q -x`, DTD v10 to v13 (old and new element names)."""
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as exc:
        raise Unreadable("nvidia-smi XML reader", text, str(exc)) from None
    if root.tag != "nvidia_smi_log":
        raise Unreadable("nvidia-smi XML reader", text, f"root element is <{root.tag}>, not <nvidia_smi_log>")
    gpus = []
    mig_devices = 0
    for gpu in root.findall("gpu"):
        mig_devices += len(gpu.findall("mig_devices/mig_device"))
        gpus.append(Gpu(
            name=(gpu.findtext("product_name") or "").strip(),
            memory_mib=_int(gpu.findtext("fb_memory_usage/total")),
            persistence=_flag(gpu.findtext("persistence_mode")),
            ecc=_mode(gpu.findtext("ecc_mode/current_ecc")),
            mig=_mode(gpu.findtext("mig_mode/current_mig")),
            bus_id=gpu.get("id"),
            health=_health(gpu),
        ))
    processes = len(root.findall("gpu/processes/process_info"))
    driver, _ = _version(_x(root, "driver_version", "kmd_version"))
    cuda, note = _version(root.findtext("cuda_version") or root.findtext("cuda_umd_version"))
    return GpuReport("xml", gpus, driver=driver, cuda=cuda, cuda_note=note, mig_devices=mig_devices,
                     processes=processes)


# R610+ renamed the header fields: "KMD Version:" and "CUDA UMD Version:".
_TABLE_HEAD = re.compile(r"(?:Driver|KMD) Version:\s*(\S+)(?:\s+CUDA(?: UMD)? Version:\s*(\S+(?: Found)?))?")
_TABLE_GPU = re.compile(r"^\|\s+(\d+)\s+(.+?)\s+(On|Off|ERR!)\s+\|\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s+"
                        r"(?:On|Off|ERR!)\s+\|\s+(\S+)\s+\|")
_TABLE_MEM = re.compile(r"(\d+)MiB\s*/\s*(\d+)MiB")
_TABLE_PROC = re.compile(r"^\|\s+\d+\s+(?:\S+\s+\S+\s+)?\d+\s+[CG+]{1,3}\s+")
_TABLE_MIG = re.compile(r"^\|\s+\d+\s+\d+\s+\d+\s+\d+\s+\|")  # GPU GI CI MIG-Dev


def is_table(text: str) -> bool:
    """A plain nvidia-smi table, also a paste cut to a few GPU rows (no NVIDIA-SMI header line)."""
    return any(_TABLE_GPU.match(line) for line in text.splitlines())


def read_table(text: str) -> GpuReport:
    """Plain `nvidia-smi` (old narrow and new wide layouts, R610+ KMD/UMD header, MIG devices box)."""
    lines = text.splitlines()
    head = next((m for m in map(_TABLE_HEAD.search, lines) if m), None)
    gpus: list[Gpu] = []
    section = "gpus"
    processes = mig_devices = 0
    errors = []
    for i, line in enumerate(lines):
        if "Processes:" in line:
            section = "processes"
        elif "MIG devices:" in line:
            section = "mig"
        if section == "processes":
            processes += bool(_TABLE_PROC.match(line))
            continue
        if section == "mig":
            mig_devices += bool(_TABLE_MIG.match(line))
            continue
        match = _TABLE_GPU.match(line)
        if not match:
            continue
        block = lines[i:i + 3]
        if any("ERR!" in b for b in block):
            errors.append(f"GPU {match.group(1)} ({match.group(4)}): nvidia-smi printed ERR!: "
                          + " / ".join(" ".join(b.split()) for b in block))
        memory = _TABLE_MEM.search(lines[i + 1]) if i + 1 < len(lines) else None
        mig_cell = lines[i + 2].rstrip(" |").split()[-1] if i + 2 < len(lines) and lines[i + 2].startswith("|") else ""
        # "Volatile Uncorr. ECC": a count when ECC is on ("On" in MIG mode, where the counts are per
        # MIG device), N/A (or Off) when it is not, ERR! when the GPU did not answer.
        ecc_cell = match.group(5)
        errors_since_load = _count(ecc_cell)
        gpus.append(Gpu(
            name=match.group(2).strip(),
            memory_mib=int(memory.group(2)) if memory else None,
            persistence={"On": True, "Off": False}.get(match.group(3)),
            ecc=True if errors_since_load is not None or ecc_cell == "On" else None if ecc_cell == "ERR!" else False,
            mig=_mode(mig_cell) if mig_cell else None,
            bus_id=match.group(4),
            health=Health(ecc_uncorrectable=errors_since_load) if errors_since_load is not None else None,
        ))
    if not gpus and not head:
        raise Unreadable("nvidia-smi table reader", text, "no header with the driver version and no GPU row")
    driver = _version(head.group(1))[0] if head else None
    cuda, note = _version(head.group(2)) if head and head.group(2) else (None, None)
    return GpuReport("table", gpus, driver=driver, cuda=cuda, cuda_note=note, processes=processes,
                     mig_devices=mig_devices, errors=tuple(errors))


_Q_LINE = re.compile(r"^( *)(\S.*?)(?:\s+:\s?(.*?))?\s*$")
Q_GPU_LINE = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$", re.M)


@dataclass
class _QNode:
    value: str | None = None
    children: dict[str, _QNode] = field(default_factory=dict)

    def get(self, *path: str) -> str | None:
        node = self
        for label in path:
            node = node.children.get(label)
            if node is None:
                return None
        return _x_value(node.value)

    def walk(self):
        for label, child in self.children.items():
            yield label, child
            yield from child.walk()


def _q_tree(block: str) -> _QNode:
    """One GPU's `nvidia-smi -q` section as a tree of its indented "Label : value" lines."""
    root = _QNode()
    stack: list[tuple[int, _QNode]] = [(-1, root)]
    for line in block.splitlines():
        match = _Q_LINE.match(line)
        if not match or not line.strip():
            continue
        indent = len(match.group(1))
        while stack[-1][0] >= indent:
            stack.pop()
        node = _QNode(match.group(3))
        stack[-1][1].children.setdefault(match.group(2), node)
        stack.append((indent, node))
    return root


def _q_counts(section: _QNode | None, uncorrectable: bool) -> int | None:
    """ECC counters of one -q section (Volatile / Aggregate): DRAM/SRAM lines (Ampere and later)
    or the Single Bit / Double Bit totals (before)."""
    if section is None:
        return None
    found = []
    for label, child in section.children.items():
        if label in ("Single Bit", "Double Bit") and (label == "Double Bit") == uncorrectable:
            found.append(_count(child.get("Total") if child.children else child.value))
        elif ("Uncorrectable" in label) == uncorrectable and "orrectable" in label:
            found.append(_count(child.value))
    found = [f for f in found if f is not None]
    return sum(found) if found else None


def _q_health(gpu: _QNode) -> Health | None:
    sections = ("ECC Errors", "Retired Pages", "Remapped Rows", "PCI", "Clocks Event Reasons",
                "Clocks Throttle Reasons", "Fabric", "Utilization")
    if not any(name in gpu.children for name in sections):
        return None
    ecc = gpu.children.get("ECC Errors")
    link = gpu.children.get("PCI", _QNode()).children.get("GPU Link Info", _QNode())
    reasons = gpu.children.get("Clocks Event Reasons") or gpu.children.get("Clocks Throttle Reasons")
    clock_reasons = None if reasons is None else tuple(sorted(
        "gpu_idle" if label == "Idle" else label.lower().replace(" ", "_")
        for label, node in reasons.walk() if (node.value or "").strip() == "Active"))
    return Health(
        ecc_uncorrectable=_q_counts(ecc and ecc.children.get("Volatile"), True),
        ecc_correctable=_q_counts(ecc and ecc.children.get("Volatile"), False),
        ecc_uncorrectable_aggregate=_q_counts(ecc and ecc.children.get("Aggregate"), True),
        retired_sbe=_count(gpu.get("Retired Pages", "Single Bit ECC")),
        retired_dbe=_count(gpu.get("Retired Pages", "Double Bit ECC")),
        retired_pending=_yes(gpu.get("Retired Pages", "Pending Page Blacklist")
                             or gpu.get("Retired Pages", "Pending Page Retirement")),
        remap_pending=_yes(gpu.get("Remapped Rows", "Pending")),
        remap_failure=_yes(gpu.get("Remapped Rows", "Remapping Failure Occurred")),
        remap_uncorrectable=_count(gpu.get("Remapped Rows", "Uncorrectable Error")),
        pcie_width=_int(link.get("Link Width", "Current")), pcie_width_max=_int(link.get("Link Width", "Max")),
        pcie_gen=_int(link.get("PCIe Generation", "Device Current") or link.get("PCIe Generation", "Current")),
        pcie_gen_max=_int(link.get("PCIe Generation", "Device Max") or link.get("PCIe Generation", "Max")),
        utilization=_int(gpu.get("Utilization", "GPU")), clock_reasons=clock_reasons,
        fabric_state=gpu.get("Fabric", "State"), fabric_status=gpu.get("Fabric", "Status"),
        architecture=gpu.get("Product Architecture"), recovery_action=gpu.get("GPU Recovery Action"))


def read_q(text: str) -> GpuReport:
    """`nvidia-smi -q` (text), whole or with -d (ECC, ROW_REMAPPER, ...), with or without its
    NVSMI LOG header; a paste cut to one GPU's section too."""
    top = dict(re.findall(r"^(Driver Version|KMD Version|CUDA Version|CUDA UMD Version)\s*:\s*(.+?)\s*$", text, re.M))
    parts = Q_GPU_LINE.split(text)
    gpus = []
    for bus_id, block in zip(parts[1::2], parts[2::2]):
        gpu = _q_tree(block)
        gpus.append(Gpu(name=gpu.get("Product Name") or "", memory_mib=_int(gpu.get("FB Memory Usage", "Total")),
                        persistence=_flag(gpu.get("Persistence Mode")),
                        ecc=_mode(gpu.children["ECC Mode"].children.get("Current", _QNode()).value)
                        if "ECC Mode" in gpu.children else None,
                        mig=_mode(gpu.children["MIG Mode"].children.get("Current", _QNode()).value)
                        if "MIG Mode" in gpu.children else None,
                        bus_id=bus_id, health=_q_health(gpu)))
    # R610: "Driver Version : 610.57.04 [Deprecated; ...]", and KMD Version / CUDA UMD Version
    driver = _version(top.get("KMD Version") or (top.get("Driver Version") or "").split(" [")[0] or None)[0]
    cuda, note = _version(top.get("CUDA UMD Version") or (top.get("CUDA Version") or "").split(" [")[0] or None)
    return GpuReport("q", gpus, driver=driver, cuda=cuda, cuda_note=note)


def read_list(text: str) -> GpuReport:
    """`nvidia-smi -L`: GPUs and, indented under them, their MIG devices."""
    gpus = [Gpu(name=m.group(1).strip()) for m in re.finditer(r"^GPU \d+: (.+?) \(UUID:", text, re.M)]
    mig = len(re.findall(r"^\s+MIG \S+\s+Device\s+\d+:", text, re.M))
    gpus = [Gpu(name=g.name, mig=True if mig else None) for g in gpus]
    return GpuReport("list", gpus, mig_devices=mig)


def read_version(text: str) -> GpuReport:
    """`nvidia-smi --version`: versions only, no GPUs (R610+: KMD version, CUDA UMD Version)."""
    fields = {k.strip().lower(): v.strip() for k, v in re.findall(r"^(\w[\w ]*?)\s*:\s*(.+?)\s*$", text, re.M)}
    driver = _version(fields.get("kmd version") or fields.get("driver version"))[0]
    cuda, note = _version(fields.get("cuda umd version") or fields.get("cuda version"))
    if not driver and not cuda:
        raise Unreadable("nvidia-smi --version reader", text, "no driver (KMD) version and no CUDA version")
    return GpuReport("version", [], driver=driver, cuda=cuda, cuda_note=note)


def read(text: str) -> GpuReport:
    """Any GPU listing nvidia-smi prints, recognised by its shape; Unreadable when it is none of them."""
    stripped = text.lstrip()
    if stripped.startswith("<?xml") or stripped.startswith("<nvidia_smi_log") or stripped.startswith("<!DOCTYPE"):
        return read_xml(text)
    if "NVIDIA-SMI version" in text:
        return read_version(text)
    if re.search(r"^GPU \d+: .+\(UUID:", text, re.M):
        return read_list(text)
    if "Attached GPUs" in text or Q_GPU_LINE.search(text):
        return read_q(text)
    if _TABLE_HEAD.search(text) or re.search(r"^\|\s*NVIDIA-SMI \S+", text, re.M) or is_table(text):
        return read_table(text)
    if classify(text):
        raise Unreadable("nvidia-smi listing reader", text, f"this is an error message: {classify(text).cause}")
    return read_csv(text)


# --- topology ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Topology:
    gpus: int
    links: dict[tuple[int, int], str] = field(default_factory=dict)  # (0, 1) -> "NV18", "PXB", ...

    def nvlinked_pairs(self) -> int:
        return sum(1 for kind in self.links.values() if kind.startswith("NV"))


# A cell of the GPU-by-GPU matrix: X (self), NV<n>, SYS, NODE, PHB, PXB, PIX, and older/rarer kinds.
_TOPO_CELL = re.compile(r"X|NV\d+|SYS|NODE|PHB|PXB|PIX|PSB|SOC|CNS|TNS|NS|OK|U")


def _topo_header(cells: list[str]) -> bool:
    """GPU0 followed by a column name (GPU1, NIC0, mlx5_0, CPU ...), not a matrix cell."""
    return len(cells) >= 2 and cells[0] == "GPU0" and not _TOPO_CELL.fullmatch(cells[1])


def read_topo(text: str) -> Topology:
    """`nvidia-smi topo -m`: how every pair of GPUs is connected.

    nvidia-smi separates the columns with tabs; a paste from a terminal or a web page often has
    runs of spaces instead, and loses the header's leading tab. The GPU columns come first, in
    order, and no GPU cell holds a space, so the matrix is read by position from whitespace-split
    rows (the columns after them, CPU Affinity "0-63,128-191", NUMA Affinity, GPU NUMA ID, may be
    empty or hold spaces and are not read)."""
    # The header is underlined with ANSI escapes; text copied from web pages keeps "[4m" without the ESC.
    lines = [re.sub(r"\x1b?\[[0-9;]*m", "", line).split() for line in text.splitlines()]
    header = next((cells for cells in lines if _topo_header(cells)), [])
    gpu_columns = []
    for name in header:
        if not re.fullmatch(r"GPU\d+", name):
            break
        gpu_columns.append(int(name[3:]))
    rows = [cells for cells in lines if cells and re.fullmatch(r"GPU\d+", cells[0]) and not _topo_header(cells)]
    links = {}
    for row in rows:
        a = int(row[0][3:])
        for position, b in enumerate(gpu_columns, start=1):
            if position < len(row) and a < b:
                links[(a, b)] = row[position]
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
