"""Finalized features survive a restart of a single broker (kept in its metadata store, written
before UpdateFeatures is answered), with their epoch."""

from __future__ import annotations

from compat_tests.scenarios.test_features import NEW_CLUSTER, SAFE_DOWNGRADE, UPGRADE, finalized, update


def test_finalized_features_survive_a_restart(own_pybroker) -> None:
    assert finalized(own_pybroker.bootstrap) == (NEW_CLUSTER, 1)
    answer = update(
        own_pybroker.bootstrap,
        1,
        [
            {"feature": "transaction.version", "max_version_level": 1, "upgrade_type": SAFE_DOWNGRADE},
            {"feature": "share.version", "max_version_level": 0, "upgrade_type": SAFE_DOWNGRADE},
        ],
    )
    assert answer["error_code"] == 0, answer
    changed = {"group.version": 1, "streams.version": 1, "transaction.version": 1}
    assert finalized(own_pybroker.bootstrap) == (changed, 2)
    # validate only: nothing is written, the epoch stays
    answer = update(own_pybroker.bootstrap, 1, [{"feature": "share.version", "max_version_level": 1}], validate_only=True)
    assert answer["error_code"] == 0, answer
    own_pybroker.stop()
    own_pybroker.start()
    assert finalized(own_pybroker.bootstrap) == (changed, 2)
    answer = update(own_pybroker.bootstrap, 1, [{"feature": "share.version", "max_version_level": 1, "upgrade_type": UPGRADE}])
    assert answer["error_code"] == 0, answer
    own_pybroker.stop()
    own_pybroker.start()
    assert finalized(own_pybroker.bootstrap) == ({**changed, "share.version": 1}, 3)
