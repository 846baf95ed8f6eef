from django.apps import AppConfig

DISPATCH_MODE = "redis"


class RedisIndexConfig(AppConfig):
    name = "tasksapp.contrib.redis_index"
    label = "tempo_redis_index"
    verbose_name = "Tempo: the Redis due index"

    def ready(self) -> None:
        from tasksapp.contrib.redis_index.source import RedisIndexSource
        from tasksapp.engine.dispatcher.sources.base import register_due_source

        register_due_source(DISPATCH_MODE, RedisIndexSource)
