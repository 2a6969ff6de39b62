"""The compute estimate of a model card: device-hours from the run's own launch records, energy and emissions only
from figures the user gives (``CardConfig.power_watts``, ``carbon_intensity``); nothing is assumed.

Device-hours of a launch = its wall time (header to last logged iteration, ``bloomtrain.metrics.Launch``) x its
GPUs, or on CPU x its processes x their torch threads (core-hours). Energy = device-hours x power per device / 1000
(kWh); emissions = energy x carbon intensity (kg CO2eq). Time outside the training loop (start-up, the final
save) is not counted: the figures are a lower bound, and the card says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from bloomtrain.config import CardConfig
from bloomtrain.metrics import Launch

UNITS = {"cuda": "GPU-hours", "cpu": "CPU core-hours"}


@dataclass
class ComputeEstimate:
    wall_seconds: float  # every launch's training loop, summed
    launches: int
    hours: dict[str, float]  # unit (GPU-hours, CPU core-hours) -> hours
    energy_kwh: float | None  # None: no power figure given
    emissions_kg: float | None  # None: no power or no carbon-intensity figure given


def device_hours(launch: Launch) -> tuple[str, float]:
    env = launch.environment
    devices = env.processes if env.device == "cuda" else env.processes * env.threads_per_process
    return UNITS.get(env.device, f"{env.device}-hours"), launch.seconds * devices / 3600.0


def estimate(launches: list[Launch], card: CardConfig) -> ComputeEstimate | None:
    """The estimate over ``launches``; None when none recorded its time."""
    if not launches:
        return None
    hours: dict[str, float] = {}
    for launch in launches:
        unit, h = device_hours(launch)
        hours[unit] = hours.get(unit, 0.0) + h
    energy = sum(hours.values()) * card.power_watts / 1000.0 if card.power_watts is not None else None
    emissions = energy * card.carbon_intensity if energy is not None and card.carbon_intensity is not None else None
    return ComputeEstimate(wall_seconds=sum(launch.seconds for launch in launches), launches=len(launches),
                           hours=hours, energy_kwh=energy, emissions_kg=emissions)


def duration(seconds: float) -> str:
    """'2 h 05 min', '3 min 12 s', '41.2 s'."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
