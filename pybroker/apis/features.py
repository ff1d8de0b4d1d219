"""UpdateFeatures (57): change the cluster's finalized features (KIP-584, KIP-778).

Kafka's broker forwards the request to its controller (ControllerApis.handleUpdateFeatures), which
needs Alter on the cluster and applies every update or none (FeatureControlManager).  Measured
against Apache Kafka 4.3.1: a refused update answers INVALID_UPDATE_VERSION at the top level with
"The update failed for all features since the following feature had an error: ..." and no
per-feature results; a successful one lists every requested feature (v0-1) with NONE; v2 has no
results at all.  At v0 the AllowDowngrade flag does not make a downgrade: 4.3.1 reads every v0
update as an upgrade (its UpgradeType field, which v0 lacks, defaults to 1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.apis import RequestContext, auth, handles
from pybroker.metadata.features import FeatureUpdate, FeatureUpdateFailed, UpgradeType
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.messages.api_keys import ApiKey

if TYPE_CHECKING:
    from pybroker.protocol.typed.admin import UpdateFeaturesRequest, UpdateFeaturesResponse


@handles(ApiKey.UPDATE_FEATURES, 0, 2)
def handle_update_features(ctx: RequestContext, request: UpdateFeaturesRequest) -> UpdateFeaturesResponse:
    keys = request.get("feature_updates", [])
    if not auth.authorize_cluster(ctx, auth.ALTER):
        return _error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, auth.default_message(ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
    updates = [
        FeatureUpdate(
            k["feature"],
            k["max_version_level"],
            k.get("upgrade_type", UpgradeType.UPGRADE) if ctx.version >= 1 else UpgradeType.UPGRADE,
        )
        for k in keys
    ]
    try:
        ctx.services.features.update(updates, validate_only=ctx.version >= 1 and request.get("validate_only", False))
    except FeatureUpdateFailed as e:
        return _error(ErrorCode.INVALID_UPDATE_VERSION, str(e))
    except Exception as e:  # noqa: BLE001 - e.g. a concurrent change in ZooKeeper, a failed write
        return _error(ErrorCode.FEATURE_UPDATE_FAILED, f"Unable to update finalized features: {e}")
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "results": [{"feature": k["feature"], "error_code": ErrorCode.NONE, "error_message": "NONE"} for k in keys],
    }


def _error(code: ErrorCode, message: str) -> UpdateFeaturesResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "results": []}
