"""The ``data`` of each result file kind but infer's (:mod:`aihpc.records.files`).

Each kind's data is a record of the fields its command writes; a kind whose
data has not been given its record yet keeps the JSON object as written
(``dict[str, Any]``), checked only for being an object.
"""

from __future__ import annotations

from typing import Any

BenchOperatorsData = dict[str, Any]
BenchNetworkData = dict[str, Any]
BenchTrainingData = dict[str, Any]
BenchDistributedData = dict[str, Any]
ProfileData = dict[str, Any]
RooflineData = dict[str, Any]
RecommendData = dict[str, Any]
CalibrationData = dict[str, Any]
ValidationData = dict[str, Any]
TrainToTargetData = dict[str, Any]
