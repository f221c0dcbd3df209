"""ClusterSpec's price_per_hour and autoscale fields, and the SDK-side validation of autoscale settings."""

from __future__ import annotations

import pytest

from batchai_sdk._models import (
    ClusterSpec,
    autoscale_from_batchai,
    autoscale_settings,
)
from batchai_sdk.exceptions import BatchAIJsonError, ValidationError
from batchai_sdk.node.policy.autoscale import AutoScaleSettings


def test_round_trip_with_price_and_autoscale() -> None:
    spec = ClusterSpec("c", "Standard_NC6", 0, price_per_hour=1, autoscale=AutoScaleSettings(0, 2, 0, 5))
    again = ClusterSpec.from_dict(spec.to_dict())
    assert again.price_per_hour == 1.0 and again.autoscale == AutoScaleSettings(0, 2, 0, 5)


def test_old_records_have_neither() -> None:
    data = ClusterSpec("c", "Standard_NC6", 1).to_dict()
    del data["price_per_hour"], data["autoscale"]
    spec = ClusterSpec.from_dict(data)
    assert spec.price_per_hour is None and spec.autoscale is None


@pytest.mark.parametrize("price", [-0.01, float("inf"), float("nan"), "1.0", True])
def test_bad_price_refused(price: object) -> None:
    with pytest.raises(ValidationError) as info:
        ClusterSpec("c", "Standard_NC6", 1, price_per_hour=price)  # type: ignore[arg-type]
    assert info.value.field == "price_per_hour"


def test_autoscale_settings_errors_are_validation_errors_naming_the_argument() -> None:
    assert autoscale_settings(0, 4, None, 600) == AutoScaleSettings(0, 4)
    with pytest.raises(ValidationError) as info:
        autoscale_settings(3, 2)
    assert info.value.field == "max_nodes"
    with pytest.raises(ValidationError) as info:
        ClusterSpec.from_dict(
            {**ClusterSpec("c", "x", 1).to_dict(), "autoscale": {"min_nodes": 1, "max_nodes": 0}}
        )
    assert info.value.field == "autoscale.max_nodes"


def test_autoscale_from_batchai_raises_json_error() -> None:
    assert autoscale_from_batchai({"minimumNodeCount": 0, "maximumNodeCount": 2}) == AutoScaleSettings(
        0, 2, 0
    )
    with pytest.raises(BatchAIJsonError) as info:
        autoscale_from_batchai({"minimumNodeCount": 2, "maximumNodeCount": 1})
    assert info.value.field == "autoScaleSettings.maximumNodeCount"
