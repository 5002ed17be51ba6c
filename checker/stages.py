"""The checker's fixed stage vocabulary (checker contract), in pipeline order.

Every check belongs to exactly one stage; diagnosis and reports order stages this way.
"""

STAGES = (
    "rewards",
    "advantages",
    "logprobs",
    "masking",
    "ratio",
    "clipping",
    "kl",
    "loss_aggregation",
    "decode",
    "generation",
    "reference_model",
    "update",
)

# The stages whose functions compute the numbers an update step consumes.
COMPUTE_STAGES = STAGES[: STAGES.index("loss_aggregation") + 1]
