"""Every model that crosses a stage boundary. Import from here."""

from kernelopt.models.common import BACKENDS, CATEGORIES, Backend, Category, DType, Model
from kernelopt.models.diagnosis import Bottleneck, Diagnosis, Evidence
from kernelopt.models.experience import (
    ExperienceAnswer,
    ExperienceRecord,
    ExperienceStats,
    KnownFailure,
    SearchHit,
    Situation,
)
from kernelopt.models.harness import (
    BenchResult,
    Candidate,
    FailureReason,
    OutputCheck,
    Problem,
    Timing,
    TimingStats,
    Trial,
    Verification,
)
from kernelopt.models.metrics import (KernelMetrics, Metrics, MetricValue, ProfileResult, Roofline, RuleResult,
                                     StaticResources)
from kernelopt.models.recommendation import Advice, Recommendation, Seed
from kernelopt.models.strategy import Knob, Override, PackCheck, PackInfo, Strategy, StrategyPack, StrategySet

__all__ = [
    "BACKENDS", "CATEGORIES", "Backend", "Category", "DType", "Model",
    "Bottleneck", "Diagnosis", "Evidence",
    "ExperienceAnswer", "ExperienceRecord", "ExperienceStats", "KnownFailure", "SearchHit", "Situation",
    "BenchResult", "Candidate", "FailureReason", "OutputCheck", "Problem", "Timing", "TimingStats", "Trial",
    "Verification",
    "KernelMetrics", "Metrics", "MetricValue", "ProfileResult", "Roofline", "RuleResult", "StaticResources",
    "Advice", "Recommendation", "Seed",
    "Knob", "Override", "PackCheck", "PackInfo", "Strategy", "StrategyPack", "StrategySet",
]
