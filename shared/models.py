"""Every model, imported once so that `Base.metadata` is complete (Alembic, tests)."""

from shared.agents.models import AgentProfile
from shared.auth.models import ApiKey, Org
from shared.curation.models import MemoryChange
from shared.embeddings.schema import VECTOR_TABLES
from shared.evaluations.models import Evaluation
from shared.facts.models import FactsDocument
from shared.infra.db.base import Base
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
