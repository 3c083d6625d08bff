from django.db import models


class Signup(models.Model):
    email = models.EmailField(unique=True)
    welcomed = models.BooleanField(default=False)
