"""The engine: QueuesManager, Queue, LogicalQueue and the lifecycle that run queues on one node.

Modules: ``queues_manager`` (the queues this node serves, started and handed off), ``hand_off_log``
(its recent hand-offs, partition by partition), ``queue`` (one queue's
settings and its logical queue), ``logical_queue`` (the single writer of a queue's partitions: its loop,
lifecycle and timers), with ``_requests`` (what callers put on its request list), ``_batch`` (placing
one batch's requests on the partitions' transactions and answering them), ``_partition`` (its view of
one partition) and ``_stats`` (what it reports); ``distribution`` and ``backlog`` (which partition a
produce or a lease goes to), and ``redrive`` (moving a dead-letter queue's items).
"""
