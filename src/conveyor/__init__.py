"""Conveyor: a background task queue for Python with one API over memory, SQLite and Redis.

Public names are re-exported here; everything else is private to its module.
"""

from conveyor.app import Conveyor
from conveyor.clock import FakeClock, SystemClock
from conveyor.context import TaskContext, current_task
from conveyor.errors import (
    BrokerError,
    BrokerUnavailable,
    ConfigurationError,
    ConveyorError,
    DuplicateTask,
    InvalidTransition,
    LeaseLost,
    PermanentError,
    QueueFull,
    QueueNotFound,
    ReplicationTimeout,
    ResultTimeout,
    Retry,
    SchemaError,
    SerializationError,
    TaskFailed,
    TaskNotFound,
    TaskTimeout,
    UnknownBackoff,
    UnknownTask,
)
from conveyor.inspect import Inspector, TimelineEntry
from conveyor.lease import Lease
from conveyor.model import (
    ArchiveReason,
    BrokerPolicy,
    ErrorEntry,
    QueueInfo,
    TaskDeclaration,
    TaskInfo,
    TaskState,
    WorkerInfo,
)
from conveyor.retry import Backoff, Exponential, Fixed, register_backoff
from conveyor.task import BoundTask, Task, TaskHandle
from conveyor.worker import Middleware, Worker, WorkerConfig, run_worker

__version__ = "0.1.0"

__all__ = [
    "ArchiveReason",
    "Backoff",
    "BoundTask",
    "BrokerError",
    "BrokerPolicy",
    "BrokerUnavailable",
    "ConfigurationError",
    "Conveyor",
    "ConveyorError",
    "DuplicateTask",
    "ErrorEntry",
    "Exponential",
    "FakeClock",
    "Fixed",
    "Inspector",
    "InvalidTransition",
    "Lease",
    "LeaseLost",
    "Middleware",
    "PermanentError",
    "QueueFull",
    "QueueInfo",
    "QueueNotFound",
    "ReplicationTimeout",
    "ResultTimeout",
    "Retry",
    "SchemaError",
    "SerializationError",
    "SystemClock",
    "Task",
    "TaskContext",
    "TaskDeclaration",
    "TaskFailed",
    "TaskHandle",
    "TaskInfo",
    "TaskNotFound",
    "TaskState",
    "TaskTimeout",
    "TimelineEntry",
    "UnknownBackoff",
    "UnknownTask",
    "Worker",
    "WorkerConfig",
    "WorkerInfo",
    "current_task",
    "register_backoff",
    "run_worker",
]
