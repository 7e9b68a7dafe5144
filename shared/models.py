"""Every model, imported once so that `Base.metadata` is complete (Alembic, tests), and the
comparison of the models with the migrations (`driftless db check`, a new revision)."""

from alembic import command
from alembic.config import Config

from shared.agents.models import AgentProfile
from shared.auth.models import ApiKey, Org
from shared.curation.models import MemoryChange
from shared.embeddings.schema import VECTOR_TABLES
from shared.evaluations.models import Evaluation
from shared.facts.models import FactsDocument
from shared.infra.db.base import Base
from shared.infra.db.migrate import alembic_config
from shared.memory.versions import MemoryVersion
from shared.notes.models import NotesDocument
from shared.providers.models import OrgProvider, OrgProvidersVersion
from shared.reevaluations.models import ReevaluationCampaign, ReevaluationItem
from shared.sessions.models import ChatSession, Message
from shared.topics.models import Fork, Topic
from shared.usage.models import LLMUsage
from shared.webhooks.models import Webhook, WebhookDelivery, WebhookEvent

__all__ = [
    "VECTOR_TABLES",
    "AgentProfile",
    "ApiKey",
    "Base",
    "ChatSession",
    "Evaluation",
    "FactsDocument",
    "Fork",
    "LLMUsage",
    "MemoryChange",
    "MemoryVersion",
    "Message",
    "NotesDocument",
    "Org",
    "OrgProvider",
    "OrgProvidersVersion",
    "ReevaluationCampaign",
    "ReevaluationItem",
    "Topic",
    "Webhook",
    "WebhookDelivery",
    "WebhookEvent",
]


def check(database_url: str) -> None:
    """Raise if the models and the migrations disagree (a model changed without a migration)."""
    command.check(_compared(database_url))


def revision(database_url: str, message: str) -> None:
    command.revision(_compared(database_url), message=message, autogenerate=True)


def _compared(database_url: str) -> Config:
    return alembic_config(database_url, metadata=Base.metadata, unmodelled=VECTOR_TABLES)
