"""Demo graph tasks: the two SYNCED jobs of the task-graph thesis.

- friends: ``has user_id, wants friends``. Load the user's tokens, then fetch Facebook
  friends, Google+ circles, YouTube subscriptions and Soundcloud follows in parallel,
  then merge them into one friend list.
- suggestions: ``has user_id, wants suggestions``. The friends job, then what the friends
  watched and rated on YouTube and played and rated on Soundcloud, filtered by the user's
  interests, ranked into suggestions.

The contract every graph task follows:

- it is a function ``task(inputs: dict) -> dict``, registered with ``@graph_task``;
- ``inputs`` holds one value per name in ``requires`` (from the job's ``has`` or from
  the task named in ``Plan.steps[task].needs``), plus each name in ``optional`` that the
  job's ``has`` carries;
- it returns a dict with a value for every name in ``provides`` (other keys are
  dropped); values are JSON-serialisable, since they travel between workers and are kept
  with the job;
- it fails by raising; the job's strategy decides what follows (a ``rescue`` hook and a
  retry, a restart, or a rollback). A task may run again after a failure, so its outside
  effects should be idempotent.

Demo settings, read from the job's ``has`` (optional inputs of every demo task):

- ``latency_scale`` (default 1.0): each call sleeps 1-5 s times this, like the thesis's
  calls to outside services; 0 makes the demo instant;
- ``failure_rate`` (default 0.02): the probability that a call fails.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any

from tasksapp.graphs.registry import graph_task

log = logging.getLogger(__name__)

OPTIONAL = ("latency_scale", "failure_rate")
DEFAULT_FAILURE_RATE = 0.02
PEOPLE = 40  # the demo's social network: person-00 .. person-39
TOPICS = ("jazz", "techno", "cooking", "climbing", "chess", "film", "travel", "science")

ERR_UNAVAILABLE = "{service} did not answer (simulated, failure rate {rate:.0%})"
ERR_TOKEN = "{service} rejected the access token (simulated, failure rate {rate:.0%})"

DEMO_JOBS: dict[str, dict[str, list[str]]] = {
    "friends": {"has": ["user_id"], "wants": ["friends"]},
    "suggestions": {"has": ["user_id"], "wants": ["suggestions"]},
}


class ServiceUnavailable(RuntimeError):
    """A simulated outside service failed; retrying may help."""


class InvalidToken(RuntimeError):
    """A simulated outside service rejected its token; ``rescue`` refreshes it."""


def _call(inputs: dict[str, Any], service: str, error: type[Exception] = ServiceUnavailable):
    """Wait like a call to ``service`` would, and fail at the configured rate."""
    time.sleep(random.uniform(1.0, 5.0) * float(inputs.get("latency_scale", 1.0)))
    rate = float(inputs.get("failure_rate", DEFAULT_FAILURE_RATE))
    if random.random() < rate:
        template = ERR_TOKEN if error is InvalidToken else ERR_UNAVAILABLE
        raise error(template.format(service=service, rate=rate))


def _people(user_id: Any, network: str, count: int) -> list[str]:
    """The same ``count`` people for one user and network every time."""
    rng = random.Random(f"{network}:{user_id}")
    return sorted(f"person-{n:02d}" for n in rng.sample(range(PEOPLE), count))


def _media(person: str, kind: str) -> list[dict[str, str]]:
    rng = random.Random(f"{kind}:{person}")
    return [
        {"id": f"{kind}:{rng.randrange(100):02d}", "topic": rng.choice(TOPICS), "by": person}
        for _ in range(2)
    ]


# --- friends -------------------------------------------------------------------------

_NETWORKS = ("facebook", "google", "youtube", "soundcloud")


@graph_task(
    name="demo.load_tokens",
    requires=["user_id"],
    provides=["facebook_token", "google_token", "youtube_token", "soundcloud_token"],
    optional=OPTIONAL,
)
def load_tokens(inputs: dict[str, Any]) -> dict[str, Any]:
    _call(inputs, "token store")
    user = inputs["user_id"]
    return {f"{network}_token": f"{network}-token-{user}" for network in _NETWORKS}


@graph_task(
    name="demo.fetch_facebook_friends",
    requires=["user_id", "facebook_token"],
    provides=["facebook_friends"],
    optional=OPTIONAL,
)
def fetch_facebook_friends(inputs: dict[str, Any]) -> dict[str, Any]:
    _call(inputs, "Facebook")
    return {"facebook_friends": _people(inputs["user_id"], "facebook", 8)}


def refresh_google_token(inputs: dict[str, Any], error: BaseException) -> dict[str, Any] | None:
    """Rescue hook: a rejected token is replaced before the retry; other errors are left
    to the retry alone."""
    if isinstance(error, InvalidToken):
        log.info("demo: refreshing the Google token for user %s", inputs["user_id"])
        return {"google_token": f"google-token-{inputs['user_id']}-refreshed"}
    return None


@graph_task(
    name="demo.fetch_google_circles",
    requires=["user_id", "google_token"],
    provides=["google_circles"],
    optional=OPTIONAL,
    rescue=refresh_google_token,
)
def fetch_google_circles(inputs: dict[str, Any]) -> dict[str, Any]:
    _call(inputs, "Google+", InvalidToken)
    return {"google_circles": _people(inputs["user_id"], "google", 6)}


@graph_task(
    name="demo.fetch_youtube_subscriptions",
    requires=["user_id", "youtube_token"],
    provides=["youtube_subscriptions"],
    optional=OPTIONAL,
)
def fetch_youtube_subscriptions(inputs: dict[str, Any]) -> dict[str, Any]:
    _call(inputs, "YouTube")
    return {"youtube_subscriptions": _people(inputs["user_id"], "youtube", 5)}


@graph_task(
    name="demo.fetch_soundcloud_follows",
    requires=["user_id", "soundcloud_token"],
    provides=["soundcloud_follows"],
    optional=OPTIONAL,
)
def fetch_soundcloud_follows(inputs: dict[str, Any]) -> dict[str, Any]:
    _call(inputs, "Soundcloud")
    return {"soundcloud_follows": _people(inputs["user_id"], "soundcloud", 5)}


_FRIEND_LISTS = (
    "facebook_friends",
    "google_circles",
    "youtube_subscriptions",
    "soundcloud_follows",
)


@graph_task(name="demo.merge_friends", requires=_FRIEND_LISTS, provides=["friends"])
def merge_friends(inputs: dict[str, Any]) -> dict[str, Any]:
    """One list, each friend once, with the networks they are a friend on."""
    networks: dict[str, list[str]] = {}
    for source in _FRIEND_LISTS:
        for person in inputs[source]:
            networks.setdefault(person, []).append(source)
    return {"friends": [{"id": p, "networks": networks[p]} for p in sorted(networks)]}


# --- suggestions ---------------------------------------------------------------------


def _friend_media(inputs: dict[str, Any], service: str, kind: str) -> list[dict[str, str]]:
    _call(inputs, service)
    return [item for friend in inputs["friends"] for item in _media(friend["id"], kind)]


@graph_task(
    name="demo.fetch_youtube_watched",
    requires=["friends", "youtube_token"],
    provides=["youtube_watched"],
    optional=OPTIONAL,
)
def fetch_youtube_watched(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"youtube_watched": _friend_media(inputs, "YouTube", "video")}


@graph_task(
    name="demo.fetch_youtube_rated",
    requires=["friends", "youtube_token"],
    provides=["youtube_rated"],
    optional=OPTIONAL,
)
def fetch_youtube_rated(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"youtube_rated": _friend_media(inputs, "YouTube", "rated-video")}


@graph_task(
    name="demo.fetch_soundcloud_played",
    requires=["friends", "soundcloud_token"],
    provides=["soundcloud_played"],
    optional=OPTIONAL,
)
def fetch_soundcloud_played(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"soundcloud_played": _friend_media(inputs, "Soundcloud", "track")}


@graph_task(
    name="demo.fetch_soundcloud_rated",
    requires=["friends", "soundcloud_token"],
    provides=["soundcloud_rated"],
    optional=OPTIONAL,
)
def fetch_soundcloud_rated(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"soundcloud_rated": _friend_media(inputs, "Soundcloud", "rated-track")}


@graph_task(
    name="demo.load_interests", requires=["user_id"], provides=["interests"], optional=OPTIONAL
)
def load_interests(inputs: dict[str, Any]) -> dict[str, Any]:
    _call(inputs, "profile store")
    rng = random.Random(f"interests:{inputs['user_id']}")
    return {"interests": sorted(rng.sample(TOPICS, 3))}


_ACTIVITY = ("youtube_watched", "youtube_rated", "soundcloud_played", "soundcloud_rated")


@graph_task(
    name="demo.filter_media", requires=[*_ACTIVITY, "interests"], provides=["relevant_media"]
)
def filter_media(inputs: dict[str, Any]) -> dict[str, Any]:
    interests = set(inputs["interests"])
    items = [item for source in _ACTIVITY for item in inputs[source]]
    return {"relevant_media": [item for item in items if item["topic"] in interests]}


def withdraw_suggestions(inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
    """Rollback hook: take back the suggestions this task published."""
    log.info("demo: withdrawing %d suggestions", len(outputs.get("suggestions", [])))


@graph_task(
    name="demo.suggest",
    requires=["relevant_media"],
    provides=["suggestions"],
    rollback=withdraw_suggestions,
)
def suggest(inputs: dict[str, Any]) -> dict[str, Any]:
    """The media most friends engaged with, best first (ties by id), at most ten."""
    fans: dict[str, set[str]] = {}
    for item in inputs["relevant_media"]:
        fans.setdefault(item["id"], set()).add(item["by"])
    ranked = sorted(fans, key=lambda media: (-len(fans[media]), media))[:10]
    return {"suggestions": [{"id": media, "friends": len(fans[media])} for media in ranked]}
