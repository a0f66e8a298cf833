"""WorkerPubSubBase: one method per subscriber, with ``@Subscriber`` / ``@DeadSubscriber``.

```python
class MyWorker(WorkerPubSubBase):
    @Subscriber("index")
    def update_index(self, payload: dict, subscription: dict, tarefa: dict, bd_conn) -> str: ...

    @DeadSubscriber("index")
    def index_gave_up(self, payload, subscription, tarefa, bd_conn) -> str: ...
```

``payload`` is the whole delivery envelope ``{"publication": ..., "subscription": ...}``.
Registration belongs to the class that declares the methods (and its
subclasses): two worker classes in one process never see each other's
subscribers. A subscriber without a method but with a ``url`` is delivered by
webhook, so one worker can serve mixed subscribers.
"""

from __future__ import annotations

import abc
import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from nsj_queue_lib.dbapi import DBConnection
from nsj_queue_lib.exceptions import PermanentError
from nsj_queue_lib.log import get_logger
from nsj_queue_lib.pubsub import PubSubError, parse_envelope
from nsj_queue_lib.settings import Settings
from nsj_queue_lib.task import no_handler_message
from nsj_queue_lib.worker_base import HandlerResult, WorkerBase

if TYPE_CHECKING:
    from nsj_queue_lib.fleet.subscriber_breakers import SubscriberBreakers
    from nsj_queue_lib.webhook import WebhookCaller

logger = get_logger("pubsub")

_LIVE_MARK = "_nsj_subscriber_ids"
_DEAD_MARK = "_nsj_dead_subscriber_ids"


HandlerT = TypeVar("HandlerT", bound=Callable[..., Any])


class _SubscriberMark:
    """Marks a method as the handler of a subscriber id; the class collects the marks."""

    attribute: ClassVar[str]

    def __init__(self, subscriber_id: str) -> None:
        if not isinstance(subscriber_id, str) or not subscriber_id:
            raise ValueError(f"@{type(self).__name__} needs a non-empty subscriber id")
        self.subscriber_id = subscriber_id

    def __call__(self, func: HandlerT) -> HandlerT:
        ids = getattr(func, self.attribute, ())
        setattr(func, self.attribute, (*ids, self.subscriber_id))
        return func


class Subscriber(_SubscriberMark):
    """``@Subscriber("id")``: the method handles that subscriber's deliveries."""

    attribute = _LIVE_MARK


class DeadSubscriber(_SubscriberMark):
    """``@DeadSubscriber("id")``: the method handles that subscriber's dead letters."""

    attribute = _DEAD_MARK


ClassT = TypeVar("ClassT", bound=type)


class SubscriberWebhook:
    """``@SubscriberWebhook("id")`` on a worker class, as nsj-queue-lib 1.2.2 code has it.

    Kept so that such code imports and runs unchanged; it changes nothing: a
    subscriber without a ``@Subscriber`` method whose row has a ``url`` is
    delivered by webhook anyway.
    """

    def __init__(self, subscriber_id: str) -> None:
        self.subscriber_id = subscriber_id

    def __call__(self, cls: ClassT) -> ClassT:
        return cls


def _collect(cls: type, attribute: str) -> dict[str, str]:
    """{subscriber id: method name} over the class's MRO, nearest definition first."""
    found: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            for subscriber_id in getattr(value, attribute, ()):
                found[subscriber_id] = name
    return found


class WorkerPubSubBase(WorkerBase, abc.ABC):
    _subscriber_methods: dict[str, str] = {}
    _dead_subscriber_methods: dict[str, str] = {}
    _webhook: WebhookCaller | None = None  # also without super().__init__()
    _breakers: SubscriberBreakers | None = None
    _breakers_lock = threading.Lock()
    # True: a delivery of a subscriber without a method goes by webhook (its row's
    # url), so this worker claims every delivery. False: it claims only the
    # deliveries of its @Subscriber/@DeadSubscriber subscribers and leaves the
    # others 'pendente' for the workers that handle them.
    webhook_fallback: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._subscriber_methods = _collect(cls, _LIVE_MARK)
        cls._dead_subscriber_methods = _collect(cls, _DEAD_MARK)

    def __init__(self, settings: Settings | None = None) -> None:
        super().__init__(settings)
        self._webhook: WebhookCaller | None = None

    @classmethod
    def handled_subscribers(cls) -> frozenset[str] | None:
        """Every subscriber with ``webhook_fallback``, else those with a method."""
        if cls.webhook_fallback:
            return None
        return frozenset(cls._subscriber_methods) | frozenset(cls._dead_subscriber_methods)

    def execute(self, payload: str, tarefa: dict[str, Any], bd_conn: DBConnection) -> str | None:
        envelope = parse_envelope(payload)
        if envelope is None:
            # Neither a delivery nor a processo with a @Task method: it can never succeed here.
            raise PermanentError(
                f"task {tarefa.get('id')} is not a pub/sub delivery (payload has no envelope); "
                + no_handler_message(
                    type(self), tarefa.get("processo"), self._task_registry.known()
                )
            )
        subscription = envelope["subscription"]
        subscriber_id = str(subscription["id"])
        method_name = self._subscriber_methods.get(subscriber_id)
        if method_name is not None:
            handler: Callable[..., str | None] = getattr(self, method_name)
            return handler(envelope, subscription, tarefa, bd_conn)
        if subscription.get("url"):
            caller = self._webhook_caller()
            breakers = self._subscriber_breakers()
            if breakers is None:
                return caller.deliver(envelope)
            task_id = int(tarefa["id"])
            result: str | None = breakers.deliver(
                subscriber_id, task_id, lambda: caller.deliver(envelope)
            )
            return result
        raise PubSubError(
            f"subscriber {subscriber_id!r} has no @Subscriber method in {type(self).__name__} and no url"
        )

    def execute_dead(
        self, payload: str, tarefa: dict[str, Any], bd_conn: DBConnection
    ) -> HandlerResult:
        envelope = parse_envelope(payload)
        if envelope is not None:
            subscription = envelope["subscription"]
            method_name = self._dead_subscriber_methods.get(str(subscription["id"]))
            if method_name is not None:
                handler: Callable[..., str | None] = getattr(self, method_name)
                return handler(envelope, subscription, tarefa, bd_conn)
        return super().execute_dead(payload, tarefa, bd_conn)

    def run_until_stopped(self, install_signal_handlers: bool = True) -> int:
        try:
            return super().run_until_stopped(install_signal_handlers)
        finally:
            if self._breakers is not None:
                self._breakers.close()

    def _subscriber_breakers(self) -> SubscriberBreakers | None:
        """The webhook subscribers' circuit breakers (fleet/subscriber_breakers.py), on a
        connection of their own; None outside a running worker, without a subscriber table
        or where the database has none (SingleStore)."""
        runtime, settings = self._runtime, self._settings
        if runtime is None or settings is None or not settings.queue_subscriber_table:
            return None
        if runtime.driver.limits_module is None:
            return None
        with self._breakers_lock:
            if self._breakers is None:
                from nsj_queue_lib.fleet.subscriber_breakers import SubscriberBreakers

                self._breakers = SubscriberBreakers(
                    settings.queue_name,
                    settings.queue_table,
                    settings.queue_subscriber_table,
                    functools.partial(runtime.driver.connect, autocommit=False),
                    settings.default_webhook_timeout,
                    settings.queue_task_timeout_grace,
                )
                if runtime.endpoints is not None:
                    runtime.endpoints.observer.register_subscriber_breakers(self._breakers)
            return self._breakers

    def _webhook_caller(self) -> WebhookCaller:
        if self._webhook is None:
            from nsj_queue_lib.webhook import WebhookCaller

            timeout = self._settings.default_webhook_timeout if self._settings is not None else 20.0
            self._webhook = WebhookCaller(timeout)
        return self._webhook
