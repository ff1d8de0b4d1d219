"""The BROKER_LOGGER config resource (KIP-412): the broker's log levels, read and changed at runtime
through DescribeConfigs / IncrementalAlterConfigs, as Kafka's Log4jController does for log4j.

pybroker's loggers are Python `logging` loggers (`pybroker.server`, `pybroker.storage.log`, ...) plus
"root"; levels use Kafka's names (WARN for WARNING, FATAL for CRITICAL, TRACE below DEBUG). Like Kafka,
changes are not persisted: a restart returns to the levels of the command line.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from pybroker.protocol.errors import ErrorCode
from pybroker.topic_config import ConfigEntry, ConfigSource, ConfigType

ROOT_LOGGER = "root"
TRACE = 5
# Kafka's Log4jController.VALID_LOG_LEVELS, in its order.
KAFKA_LEVELS = {
    "DEBUG": logging.DEBUG,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "INFO": logging.INFO,
    "TRACE": TRACE,
    "WARN": logging.WARNING,
}
SET, DELETE = 0, 1


class LoggerConfigError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def kafka_level_name(level: int) -> str:
    for name, value in sorted(KAFKA_LEVELS.items(), key=lambda kv: kv[1]):
        if level <= value:
            return name
    return "FATAL"


def logger_names() -> list[str]:
    """root and every pybroker logger that exists."""
    names = [
        name
        for name, obj in logging.root.manager.loggerDict.items()
        if isinstance(obj, logging.Logger) and (name == "pybroker" or name.startswith("pybroker."))
    ]
    return [ROOT_LOGGER, *sorted(names)]


def _logger(name: str) -> logging.Logger:
    return logging.getLogger() if name == ROOT_LOGGER else logging.getLogger(name)


def exists(name: str) -> bool:
    return name == ROOT_LOGGER or isinstance(logging.root.manager.loggerDict.get(name), logging.Logger)


def describe(keys: Iterable[str] | None) -> list[ConfigEntry]:
    names = logger_names() if keys is None else [k for k in keys if exists(k)]
    return [
        ConfigEntry(
            name=name,
            value=kafka_level_name(_logger(name).getEffectiveLevel()),
            source=int(ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG),
            read_only=False,
            is_default=False,
            sensitive=False,
            config_type=int(ConfigType.STRING),
            synonyms=[],
            documentation=None,
        )
        for name in names
    ]


def validate(changes: list[tuple[str, int, str | None]]) -> None:
    """Kafka's ConfigAdminManager.validateLogLevelConfigs."""
    for name, op, level in changes:
        if op == SET:
            if not exists(name):
                raise LoggerConfigError(ErrorCode.INVALID_CONFIG, f"Logger {name} does not exist!")
            if level not in KAFKA_LEVELS:
                raise LoggerConfigError(
                    ErrorCode.INVALID_CONFIG,
                    f"Cannot set the log level of {name} to {level} as it is not a supported log level. "
                    f"Valid log levels are {', '.join(KAFKA_LEVELS)}",
                )
        elif op == DELETE:
            if not exists(name):
                raise LoggerConfigError(ErrorCode.INVALID_CONFIG, f"Logger {name} does not exist!")
            if name == ROOT_LOGGER:
                raise LoggerConfigError(
                    ErrorCode.INVALID_REQUEST, f"Removing the log level of the {ROOT_LOGGER} logger is not allowed"
                )
        else:
            raise LoggerConfigError(
                ErrorCode.INVALID_REQUEST, f"Operation {op} cannot be applied to the BROKER_LOGGER resource"
            )


def apply(changes: list[tuple[str, int, str | None]]) -> None:
    if logging.getLevelName(TRACE) != "TRACE":
        logging.addLevelName(TRACE, "TRACE")
    for name, op, level in changes:
        logger = _logger(name)
        # DELETE returns the logger to its parent's level (Kafka: to the root logger's).
        logger.setLevel(KAFKA_LEVELS[level] if op == SET and level is not None else logging.NOTSET)
        logging.getLogger(__name__).info("log level of %s set to %s", name, level if op == SET else "(inherited)")
