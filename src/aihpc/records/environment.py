"""The environment a result was made in, as every result document records it.

:class:`EnvironmentRecord` is the ``environment`` of results.json and of every
result file (:mod:`aihpc.records.files`): what
:meth:`aihpc.machine.environment.Environment.to_dict` wrote, in every form it
has had.  Files of results.json's schema 1 named three fields otherwise
(``cpu_count``, ``memory_gb``, ``platform``) and lacked most of the rest; the
processor in detail (``cpu``) came later.  :meth:`EnvironmentRecord.environment`
is the machine's own record (:class:`~aihpc.machine.environment.Environment`),
for what computes with it.
"""

from __future__ import annotations

from aihpc.machine.environment import Environment, Gpu
from aihpc.machine.processor import Cache, Processor
from aihpc.records.codec import UNSET, Record, UnsetType, value_or_none


class CacheRecord(Record, frozen=True):
    """One cache of the first CPU (:class:`aihpc.machine.processor.Cache`)."""

    level: int
    kind: str
    size_bytes: int | None
    shared_by: int | None


class ProcessorRecord(Record, frozen=True):
    """The processor in detail (:class:`aihpc.machine.processor.Processor`); a field it gained
    later is absent from older files."""

    vendor: str | None | UnsetType = UNSET
    family: int | None | UnsetType = UNSET
    model: int | None | UnsetType = UNSET
    stepping: int | None | UnsetType = UNSET
    model_name: str | None | UnsetType = UNSET
    architecture: str | None | UnsetType = UNSET
    extensions: tuple[str, ...] | None = None
    sve_vector_bits: int | None | UnsetType = UNSET
    sockets: int | None | UnsetType = UNSET
    cores: int | None | UnsetType = UNSET
    threads_per_core: int | None | UnsetType = UNSET
    logical_cpus: int | None | UnsetType = UNSET
    caches: tuple[CacheRecord, ...] | None = None
    clock_mhz: float | None | UnsetType = UNSET
    max_clock_mhz: float | None | UnsetType = UNSET
    clock_source: str | None | UnsetType = UNSET
    hypervisor: bool | None | UnsetType = UNSET
    blas: str | None | UnsetType = UNSET
    onednn_version: str | None | UnsetType = UNSET
    onednn_isa: str | None | UnsetType = UNSET
    torch_cpu_capability: str | None | UnsetType = UNSET

    def processor(self) -> Processor:
        """The machine's record of the processor (checked as it is built)."""
        values = {
            name: value_or_none(getattr(self, name))
            for name in self.__struct_fields__
            if name not in ("extensions", "caches")
        }
        return Processor(
            **values,
            extensions=tuple(sorted(self.extensions or ())),
            caches=tuple(
                Cache(c.level, c.kind, c.size_bytes, c.shared_by) for c in self.caches or ()
            ),
        )


class GpuRecord(Record, frozen=True):
    """One visible CUDA device (:class:`aihpc.machine.environment.Gpu`)."""

    index: int
    name: str
    memory_bytes: int
    compute_capability: str
    multiprocessors: int


class EnvironmentRecord(Record, frozen=True):
    """The machine and software that made a result (the fields of
    :mod:`aihpc.machine.environment`): each is ``null`` where it could not be read, absent
    where the file is older than it."""

    cpu_model: str | None
    git_commit: str | None
    git_dirty: bool | None
    gpus: tuple[GpuRecord, ...]
    hostname: str | None
    python_version: str | None
    torch_version: str | None
    aihpc_version: str | None | UnsetType = UNSET
    cpu: ProcessorRecord | None | UnsetType = UNSET
    cpu_logical_cores: int | None | UnsetType = UNSET
    cpu_physical_cores: int | None | UnsetType = UNSET
    cuda_version: str | None | UnsetType = UNSET
    cudnn_version: int | None | UnsetType = UNSET
    machine: str | None | UnsetType = UNSET
    memory_total_bytes: int | None | UnsetType = UNSET
    numpy_version: str | None | UnsetType = UNSET
    nvidia_driver_version: str | None | UnsetType = UNSET
    os: str | None | UnsetType = UNSET
    python_implementation: str | None | UnsetType = UNSET
    torch_num_interop_threads: int | None | UnsetType = UNSET
    torch_num_threads: int | None | UnsetType = UNSET
    # results.json's schema 1: logical CPUs, memory in GiB, platform.platform()
    cpu_count: int | None = None
    memory_gb: float | None = None
    platform: str | None = None

    @classmethod
    def of(cls, environment: Environment) -> EnvironmentRecord:
        """The record of the machine's :class:`Environment` (as :func:`collect` gives it)."""
        from aihpc.records.codec import convert

        return convert(environment.to_dict(), cls, "the environment")

    def environment(self) -> Environment:
        """The machine's record of it (schema 1's fields read as their successors; the rest
        None where the file lacks them)."""
        cpu = self.cpu
        return Environment(
            aihpc_version=value_or_none(self.aihpc_version),
            cpu=cpu.processor() if cpu else None,
            cpu_logical_cores=value_or_none(self.cpu_logical_cores) or self.cpu_count,
            cpu_model=self.cpu_model,
            cpu_physical_cores=value_or_none(self.cpu_physical_cores),
            cuda_version=value_or_none(self.cuda_version),
            cudnn_version=value_or_none(self.cudnn_version),
            git_commit=self.git_commit,
            git_dirty=self.git_dirty,
            gpus=tuple(
                Gpu(g.index, g.name, g.memory_bytes, g.compute_capability, g.multiprocessors)
                for g in self.gpus
            ),
            hostname=self.hostname,
            machine=value_or_none(self.machine),
            memory_total_bytes=value_or_none(self.memory_total_bytes),
            numpy_version=value_or_none(self.numpy_version),
            nvidia_driver_version=value_or_none(self.nvidia_driver_version),
            os=value_or_none(self.os) or self.platform,
            python_implementation=value_or_none(self.python_implementation),
            python_version=self.python_version,
            torch_num_interop_threads=value_or_none(self.torch_num_interop_threads),
            torch_num_threads=value_or_none(self.torch_num_threads),
            torch_version=self.torch_version,
        )

    def machine_name(self) -> str:
        """The machine in a few words (:meth:`Environment.machine_name`)."""
        return self.environment().machine_name()
