"""Random-stream ids, in one place. Every random draw of a job is seeded by
(seed, stream, index...), so a resumed job and a fresh one draw exactly the same numbers and
no two purposes share a stream.
"""

STREAM_Q = 1  # Q's members' samples
STREAM_DESIGN = 2  # the bilevel training samples of each iteration
STREAM_EVAL = 3  # the evaluation's training sets (common to every candidate)
STREAM_CHECK = 4  # the fixed draws of the bilevel validation checks
STREAM_MEDIAN = 5  # the subsample of the median-distance lengthscale
STREAM_KMEANS = 6  # k-means++ seeding of a mixture family's initial components
STREAM_POOL = 7  # the subsample of Q's validation points that a pool family weights
STREAM_BOUND = 8  # the OOD bound's Monte Carlo samples and Lipschitz pairs (lwl.bound)
STREAM_TRAIN = 11  # AMA: the fixed noise of the model's training samples
STREAM_OPT = 12  # AMA: the fixed noise of the distribution step's samples
STREAM_LIP = 13  # AMA: Lipschitz-estimate pairs
STREAM_VALIDATION = 14  # validated AMA: Q's validation samples (lwl.design.validated)
STREAM_BUDGET = 15  # budgeted design: the points of each round (lwl.design.budget)
STREAM_SURROGATE = 16  # budgeted design: the samples of the bilevel steps on the surrogate
STREAM_AUDIT = 17  # equal-labels verdict: the baselines' training draws and the anchor's pool
STREAM_DOMAIN = 18  # input domain: redraws of Q's members restricted to it, their share-outside estimate
STREAM_NORMALISER = 19  # input domain: draws behind grad log Z of a restricted family (seeded by theta)
