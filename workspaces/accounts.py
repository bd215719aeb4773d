"""A person's own account: proving their email address, and how often sign-ups may come from one
client address.

Anyone can sign up with any address, so mail (the inbox digest) goes to an address only once its
person opened a link sent there: a signed token of the person and the address, good for
VERIFY_DAYS, opened while signed in as that person. Changing the address needs a new proof."""

from django.conf import settings
from django.core import signing
from django.core.mail import EmailMultiAlternatives
from django.db import transaction
from django.template.loader import render_to_string
from django.urls import reverse
from django_q.tasks import async_task

from agntchat.core import throttle
from agntchat.core.exceptions import AppError
from workspaces.audit import record_audit
from workspaces.models import User

VERIFY_DAYS = 3
SALT = "agntchat.email-verification"


class VerificationInvalid(AppError):
    code = "verification_invalid"


def verification_token(user: User) -> str:
    return signing.dumps({"user": str(user.pk), "email": user.email}, salt=SALT, compress=True)


def verify_email(user: User, token: str) -> User:
    """Mark USER's address verified if TOKEN was made for USER and that address; else
    VerificationInvalid saying why (nothing changes)."""
    try:
        found = signing.loads(token, salt=SALT, max_age=VERIFY_DAYS * 86400)
    except signing.SignatureExpired:
        raise VerificationInvalid(
            "This link has expired: send yourself a new one from your account page."
        ) from None
    except signing.BadSignature:
        raise VerificationInvalid("This link is not valid.") from None
    if found.get("user") != str(user.pk):
        raise VerificationInvalid("This link was sent to someone else: sign in as them to use it.")
    if not user.email or found.get("email") != user.email:
        raise VerificationInvalid(
            "This link was sent to an address that is no longer yours here: send a new one."
        )
    with transaction.atomic():
        user.verified_email = user.email
        user.save(update_fields=["verified_email", "updated_at"])
        record_audit("email.verified", actor=user, target=user, label=user.email)
    return user


def request_verification(user: User) -> None:
    """Queue an email with a verification link to USER's address: a few an hour at most per
    person, and per address (a person changing their address, or many accounts giving the
    same one, would otherwise mail strangers as often as they like)."""
    if not user.email:
        raise VerificationInvalid("Set an email address first.")
    person = throttle.Rate("verify:person", settings.VERIFICATION_EMAILS_PER_HOUR, window=3600)
    throttle.limit(person, user.pk, "verification emails")
    # After the person's own limit, so someone past theirs uses up nothing of the address's.
    recipient = throttle.Rate(
        "verify:recipient", settings.VERIFICATION_EMAILS_PER_HOUR_PER_RECIPIENT, window=3600
    )
    throttle.limit(recipient, user.email.strip().casefold(), "verification emails to this address")
    async_task("workspaces.accounts.send_verification", str(user.pk), user.email)


def send_verification(user_id: str, email: str) -> bool:
    """The job: the link, to EMAIL if it is still the person's address."""
    user = User.objects.filter(pk=user_id, email=email, is_active=True).first()
    if user is None:
        return False
    link = settings.AGNTCHAT_URL.rstrip("/") + reverse(
        "verify-email", args=[verification_token(user)]
    )
    context = {"user": user, "link": link, "days": VERIFY_DAYS}
    message = EmailMultiAlternatives(
        "agntchat: confirm your email address",
        render_to_string("workspaces/verify_email.txt", context),
        settings.DEFAULT_FROM_EMAIL,
        [email],
    )
    message.send()
    return True


def count_signup(address: str) -> None:
    """One sign-up more from ADDRESS: RateLimited past SIGNUPS_PER_HOUR_PER_ADDRESS."""
    rate = throttle.Rate("signups:address", settings.SIGNUPS_PER_HOUR_PER_ADDRESS, window=3600)
    throttle.limit(rate, address, "sign-ups from your address")
