"""Embedding models (sentence-transformers' SentenceTransformerTrainer): texts that belong together end up close.

The loss follows the data, and the script reads it from the columns it was given (templates/embedding.py.j2), so
a request has nothing more to say: anchor/positive pairs and anchor/positive/negative triplets train with
MultipleNegativesRankingLoss (every other row of the batch is a negative too; on several GPUs, every GPU's rows),
sentence1/sentence2/score rows with CoSENTLoss (it reads only the order of the scores: a 0-5 scale trains as a 0-1
one does).

The model is `SentenceTransformer(model)`: a sentence-transformers model keeps its own modules; a plain
transformers checkpoint gets sentence-transformers' default pooling (mean for encoders, the last token for
decoders). LoRA goes on its transformer through PEFT.

Sizing, stated as assumptions (no published embedding runs to calibrate against yet):
- two sequences per row: a pair's two texts; a triplet's three are sized as two of its longest (data/formats.py
  counts a row by its longest text, and the query of a pair is usually the short one, so the two roughly cancel);
- no language-model head (`classifier`): the embedding is pooled from the last hidden states;
- ~64 tokens per text when the data has no token statistics (queries, titles and passages of retrieval sets).
"""

from hf_train_mcp.methods.base import MethodSpec


def check(req) -> None:
    if req.peft == "qlora":
        raise ValueError("peft='qlora' is not offered for method='embedding': embedding models are small enough "
                         "for LoRA in 16-bit (peft='lora') or a full fine-tune (peft='full')")
    if getattr(req, "use_liger_kernel", False):
        raise ValueError("use_liger_kernel does not apply to method='embedding' (Liger fuses a language-model "
                         "head's loss, and an embedding model has none); leave it off")


METHOD = MethodSpec(
    name="embedding", title="embedding", summary="sentence embedding model",
    # read in this order: anchor/positive/negative rows are triplets, not pairs with a spare column
    formats=("sentence_triplets", "scored_pairs", "sentence_pairs"),
    needs="'anchor' + 'positive' (+ 'negative'), or 'sentence1' + 'sentence2' + 'score'",
    # sentence-transformers' training examples: 2e-5 for a full fine-tune, ~10x for LoRA; one epoch (their sets
    # are large, and contrastive losses overfit small ones quickly)
    learning_rate=(2e-5, 2e-4), epochs=1.0, max_length=256, tokens_per_example=64,
    eval_metric="embedding", pipeline_tag="sentence-similarity",
    aliases={
        "anchor": ("query", "question", "queries", "search_query", "sentence", "text"),
        "positive": ("pos", "answer", "document", "passage", "context", "response", "positive_passage",
                     "entailment"),
        "negative": ("neg", "hard_negative", "negative_passage", "contradiction"),
        "sentence1": ("sentence_a", "text1", "text_a", "sentence_1", "s1"),
        "sentence2": ("sentence_b", "text2", "text_b", "sentence_2", "s2"),
        "score": ("label", "similarity", "similarity_score", "relatedness_score", "scores"),
    },
    keep_columns=("anchor", "positive", "negative", "sentence1", "sentence2", "score"),
    sequences_per_example=2,
    # MultipleNegativesRankingLoss takes its negatives from the other rows of the batch (each GPU's, gathered): a
    # handful of rows per device makes the task too easy (sentence-transformers' examples use 32-128); accumulation
    # adds none
    min_batch=16,
    classifier=True, peft_task="FEATURE_EXTRACTION", check=check,
    template="embedding", library="sentence-transformers", model_library="sentence-transformers",
    dependencies=("sentence-transformers>=5,<6",),
)
