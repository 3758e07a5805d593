"""The durable job queue service, its worker, handlers and schedules."""
