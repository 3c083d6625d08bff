"""The engine: QueuesManager, Queue, LogicalQueue and the lifecycle that run queues on one node."""
