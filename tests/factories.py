import datetime as dt

import factory
from django.utils import timezone

from tasksapp.engine.models import Job


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job

    handler = "tests.handlers.recording.record"
    payload = factory.LazyFunction(dict)
    run_at = factory.LazyFunction(lambda: timezone.now() - dt.timedelta(milliseconds=10))
    retry_policy = factory.LazyFunction(lambda: {"delays": [1, 2, 5, 10, 20]})
