"""Where a job writes with the server's token, and where it sends it: its Trackio Space (trackio hands the token to
the Space's own app) and the repo it pushes to (a model, an export, an evaluated model's card).

Over stdio the caller is the token's owner: a Space or repo elsewhere is their choice, and a warning says what it
means. Over HTTP the caller is not: a Space is accepted only in the token's own namespace or one of its
organizations (else the token would reach code the caller chose), and a push only to a repo that does not exist
yet or that a job of this server pushed to before (else the caller would write over the owner's work).
"""

from hf_train_mcp.access import Access
from hf_train_mcp.errors import AccessError, HubError, TrainError
from hf_train_mcp.hub import existing_repo, resolve_identity


def check_trackio_space(space: str, *, namespace: str | None, token: str | None, access: Access,
                        warnings: list[str]) -> None:
    """A Trackio Space the job logs to: its owner must be the token's user or one of its organizations (whoami
    says which; the job's own namespace needs no look-up)."""
    owner = space.split("/")[0]
    if owner == namespace:
        return
    if not token:  # nothing runs without a token: a dry run says what a real one checks
        warnings.append(f"trackio_space_id {space!r}: a real submission checks that its owner is the token's "
                        "namespace or one of its organizations")
        return
    identity = resolve_identity(token)
    if owner in (identity.name, *identity.orgs):
        return
    said = (f"trackio_space_id {space!r} is not in the token's namespace ({identity.name}) or one of its "
            "organizations: the job hands the Space this server's Hugging Face token (trackio logs through the "
            "Space's own app)")
    if access.remote:
        raise AccessError(f"{said}, which callers over {access.over} may not choose. Leave trackio_space_id out "
                          f"(the job logs to {identity.name}/trackio) or name a Space of {identity.name}'s. "
                          "Nothing was launched.")
    warnings.append(f"{said}: make sure you trust its owner")


def check_push_target(repo: str, *, token: str | None, access: Access, pushed_before: bool, warnings: list[str],
                      dry_run: bool, what: str = "the model", export: bool = False) -> None:
    """A repo the job pushes to: an adapter's repo never takes an export (loaders would read the adapter); an
    existing repo is committed on top of (a warning over stdio; over HTTP only one a job of this server pushed
    to before). A repo that could not be looked up is not pushed to over HTTP nor exported to (a dry run, and a
    training over stdio, only say so)."""
    try:
        held = existing_repo(repo, token)
    except TrainError as exc:
        if not dry_run and (access.remote or export):  # an export's target may be an adapter's repo
            raise HubError(f"could not check whether {repo} exists before pushing {what} there ({exc}); nothing "
                           "was launched: call again in a minute") from None
        warnings.append(f"could not check whether {repo} exists yet ({exc})" + ("; a real submission checks it "
                                                                                 "first" if dry_run else ""))
        return
    if held == "adapter" and export:
        raise TrainError(f"{repo} already holds a LoRA adapter: {what} there would mix the two (loaders would read "
                         "the adapter); send another hub_model_id. Nothing was launched.")
    if held is None or pushed_before:
        return
    if access.remote:
        raise AccessError(f"{repo} already exists and no job of this server pushed to it: callers over "
                          f"{access.over} may push only to a new repo (or one this server's jobs made). Send another "
                          "hub_model_id, e.g. with a suffix. Nothing was launched.")
    warnings.append(f"{repo} already exists: {what} is committed on top of its files (its history keeps the old "
                    "ones)")
