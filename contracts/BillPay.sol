// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";
import {MessageHashUtils} from "@openzeppelin/contracts/utils/cryptography/MessageHashUtils.sol";
import {SignatureChecker} from "@openzeppelin/contracts/utils/cryptography/SignatureChecker.sol";

/// @dev The EIP-3009 views BillPay needs to check an x402 payment before refunding it.
interface IEIP3009 {
    function authorizationState(address authorizer, bytes32 nonce) external view returns (bool);
    // solhint-disable-next-line func-name-mixedcase
    function DOMAIN_SEPARATOR() external view returns (bytes32);
}

/// @title BillPay
/// @notice The bill-payment service's treasury on one chain. Every inbound payment lands here:
///         agent-hub payments are pulled by the operator from a payer's own spending allowance,
///         and x402 payments arrive as EIP-3009 transfers naming this contract as `payTo`.
///         Refunds of failed bills leave from here, and only to the original payer.
/// @dev    Roles: DEFAULT_ADMIN_ROLE manages roles, the token accept-list and withdrawals;
///         OPERATOR_ROLE (the service's hot key) pulls and refunds; PAUSER_ROLE stops pulls.
///         Pausing stops new pulls only: payers can always revoke, and refunds keep flowing.
contract BillPay is AccessControl, Pausable, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;

    bytes32 public constant OPERATOR_ROLE = keccak256("OPERATOR_ROLE");
    bytes32 public constant PAUSER_ROLE = keccak256("PAUSER_ROLE");

    bytes32 private constant TRANSFER_WITH_AUTHORIZATION_TYPEHASH = keccak256(
        "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
    );

    /// @notice An EIP-3009 TransferWithAuthorization as the payer signed it (the x402 payload).
    struct Authorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
        bytes signature;
    }

    /// @notice One item of a batch pull.
    struct PullRequest {
        bytes32 orderId;
        address payer;
        address token;
        uint256 amount;
    }

    /// @notice What the chain knows of an order id. Packed in two storage slots.
    /// @dev    `paid` is the pulled amount for agent-hub orders and 0 for x402 orders, whose
    ///         value the contract never sees (the token moves funds without calling BillPay).
    struct Order {
        address payer;
        uint96 paid;
        address token;
        bool refunded;
    }

    /// @notice payer => token => the most the operator may still pull, in raw token units.
    mapping(address payer => mapping(address token => uint256 amount)) public spendingAllowance;

    /// @notice Tokens that may be pulled or have a spending allowance set.
    mapping(address token => bool accepted) public isAcceptedToken;

    /// @notice keccak256(abi.encode(token, payer, nonce)) => an x402 payment already refunded.
    mapping(bytes32 authorizationKey => bool refunded) public authorizationRefunded;

    mapping(bytes32 orderId => Order) private _orders;

    /// @notice A payer set the most the operator may pull from it in `token` from now on.
    event SpendingAllowanceSet(address indexed payer, address indexed token, uint256 amount);
    /// @notice An agent-hub payment: `amount` moved from `payer` into this contract.
    event Pulled(
        bytes32 indexed orderId, address indexed payer, address indexed token, uint256 amount, uint256 allowanceLeft
    );
    /// @notice A refund to the order's payer. `authorizationNonce` is the refunded x402
    ///         payment's EIP-3009 nonce, or zero for a refund of a pulled order.
    event Refunded(
        bytes32 indexed orderId, address indexed payer, address indexed token, uint256 amount, bytes32 authorizationNonce
    );
    /// @notice The admin moved treasury funds out.
    event Withdrawn(address indexed token, address indexed to, uint256 amount);
    /// @notice The admin added a token to, or removed it from, the accept-list.
    event TokenAcceptanceSet(address indexed token, bool accepted);

    error ZeroAddress();
    error ZeroAmount();
    error EmptyBatch();
    error TokenNotAccepted(address token);
    error OrderExists(bytes32 orderId);
    error UnknownOrder(bytes32 orderId);
    error AlreadyRefunded(bytes32 orderId);
    error SpendingAllowanceExceeded(address payer, address token, uint256 requested, uint256 available);
    error RefundExceedsPayment(bytes32 orderId, uint256 requested, uint256 paid);
    error AuthorizationAlreadyRefunded(address token, address payer, bytes32 nonce);
    error AuthorizationNotUsed(address token, address payer, bytes32 nonce);
    error NotAnAuthorizationToken(address token);
    error AuthorizationNotToThisContract(address to);
    error InvalidAuthorizationSignature();

    /// @param admin    holds DEFAULT_ADMIN_ROLE (roles, accept-list, withdrawals)
    /// @param operator holds OPERATOR_ROLE (pulls and refunds); may be zero and granted later
    /// @param pauser   holds PAUSER_ROLE; may be zero and granted later
    /// @param tokens   the initial accept-list
    constructor(address admin, address operator, address pauser, address[] memory tokens) {
        if (admin == address(0)) revert ZeroAddress();
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
        if (operator != address(0)) _grantRole(OPERATOR_ROLE, operator);
        if (pauser != address(0)) _grantRole(PAUSER_ROLE, pauser);
        for (uint256 i = 0; i < tokens.length; ++i) {
            _setTokenAccepted(tokens[i], true);
        }
    }

    // ---------------------------------------------------------------- payers

    /// @notice Set the most the operator may pull from the caller in `token` from now on, in
    ///         raw token units. It replaces the previous figure; 0 revokes. Revoking works for
    ///         any token and even while the contract is paused. The token's own ERC-20
    ///         `approve` of this contract is needed as well: this figure only narrows it.
    function setSpendingAllowance(address token, uint256 amount) external {
        if (amount != 0 && !isAcceptedToken[token]) revert TokenNotAccepted(token);
        spendingAllowance[msg.sender][token] = amount;
        emit SpendingAllowanceSet(msg.sender, token, amount);
    }

    // -------------------------------------------------------------- operator

    /// @notice Pull `amount` of `token` from `payer` into this contract for `orderId`.
    /// @dev    The payer's spending allowance is decremented before the transfer; each order
    ///         id is accepted once ever, whether pulled or refunded as an x402 order.
    /// @return allowanceLeft the payer's spending allowance left after this pull
    function pull(bytes32 orderId, address payer, address token, uint256 amount)
        external
        onlyRole(OPERATOR_ROLE)
        whenNotPaused
        nonReentrant
        returns (uint256 allowanceLeft)
    {
        return _pull(orderId, payer, token, amount);
    }

    /// @notice Many pulls in one transaction, each under the same rules as `pull`. All or
    ///         nothing: one failing item reverts the batch, so the caller checks allowances
    ///         and balances first.
    function pullBatch(PullRequest[] calldata requests) external onlyRole(OPERATOR_ROLE) whenNotPaused nonReentrant {
        uint256 n = requests.length;
        if (n == 0) revert EmptyBatch();
        for (uint256 i = 0; i < n; ++i) {
            PullRequest calldata r = requests[i];
            _pull(r.orderId, r.payer, r.token, r.amount);
        }
    }

    /// @notice Refund a pulled order to its payer: at most the pulled amount, once.
    function refund(bytes32 orderId, uint256 amount) external onlyRole(OPERATOR_ROLE) nonReentrant {
        Order storage order = _orders[orderId];
        address payer = order.payer;
        if (payer == address(0)) revert UnknownOrder(orderId);
        if (order.refunded) revert AlreadyRefunded(orderId);
        if (amount == 0) revert ZeroAmount();
        if (amount > order.paid) revert RefundExceedsPayment(orderId, amount, order.paid);

        order.refunded = true;
        address token = order.token;
        emit Refunded(orderId, payer, token, amount, bytes32(0));
        IERC20(token).safeTransfer(payer, amount);
    }

    /// @notice Refund an order paid by x402 to its payer: the payer's signed EIP-3009
    ///         authorization (the x402 payload) is presented, and at most its value goes back.
    /// @dev    What the chain enforces here: the operator role; that `auth` is a
    ///         TransferWithAuthorization signed by `auth.from` for `token` (its own EIP-712
    ///         domain), naming this contract as payee; that its nonce has been consumed
    ///         (authorizationState is true); `amount` <= `auth.value`; one refund per
    ///         (token, payer, nonce) and per order id; the money goes only to the payer.
    ///         So even a stolen operator key can only return to payers what they authorised
    ///         this contract to take. What the chain cannot enforce: that the nonce was
    ///         consumed by this transfer rather than cancelled, because the token moved the
    ///         funds without calling BillPay. The ledger checks that instead: every Refunded
    ///         event with a non-zero nonce must match an x402 payment (AuthorizationUsed then
    ///         Transfer payer -> BillPay) of at least `amount` (`npm run audit`).
    function refundAuthorization(bytes32 orderId, address token, Authorization calldata auth, uint256 amount)
        external
        onlyRole(OPERATOR_ROLE)
        nonReentrant
    {
        address payer = auth.from;
        if (payer == address(0)) revert ZeroAddress();
        if (amount == 0) revert ZeroAmount();
        if (auth.to != address(this)) revert AuthorizationNotToThisContract(auth.to);
        if (amount > auth.value) revert RefundExceedsPayment(orderId, amount, auth.value);
        if (_orders[orderId].payer != address(0)) revert OrderExists(orderId);
        bytes32 key = keccak256(abi.encode(token, payer, auth.nonce));
        if (authorizationRefunded[key]) revert AuthorizationAlreadyRefunded(token, payer, auth.nonce);
        _requireSignedAndUsed(token, auth);

        authorizationRefunded[key] = true;
        _orders[orderId] = Order({payer: payer, paid: 0, token: token, refunded: true});
        emit Refunded(orderId, payer, token, amount, auth.nonce);
        IERC20(token).safeTransfer(payer, amount);
    }

    // ----------------------------------------------------------------- admin

    /// @notice Move treasury funds out (settled revenue to the biller float, say).
    function withdraw(address token, address to, uint256 amount) external onlyRole(DEFAULT_ADMIN_ROLE) nonReentrant {
        if (to == address(0)) revert ZeroAddress();
        if (amount == 0) revert ZeroAmount();
        emit Withdrawn(token, to, amount);
        IERC20(token).safeTransfer(to, amount);
    }

    function setTokenAccepted(address token, bool accepted) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setTokenAccepted(token, accepted);
    }

    function pause() external onlyRole(PAUSER_ROLE) {
        _pause();
    }

    function unpause() external onlyRole(PAUSER_ROLE) {
        _unpause();
    }

    // ----------------------------------------------------------------- views

    /// @notice What the chain knows of `orderId` (all zero when it has never been used).
    function orderOf(bytes32 orderId) external view returns (Order memory) {
        return _orders[orderId];
    }

    // -------------------------------------------------------------- internal

    function _pull(bytes32 orderId, address payer, address token, uint256 amount) private returns (uint256 left) {
        if (amount == 0) revert ZeroAmount();
        if (!isAcceptedToken[token]) revert TokenNotAccepted(token);
        if (_orders[orderId].payer != address(0)) revert OrderExists(orderId);
        uint256 available = spendingAllowance[payer][token];
        if (amount > available) revert SpendingAllowanceExceeded(payer, token, amount, available);

        unchecked {
            left = available - amount;
        }
        spendingAllowance[payer][token] = left;
        _orders[orderId] = Order({payer: payer, paid: SafeCast.toUint96(amount), token: token, refunded: false});
        emit Pulled(orderId, payer, token, amount, left);
        IERC20(token).safeTransferFrom(payer, address(this), amount);
    }

    function _setTokenAccepted(address token, bool accepted) private {
        if (token == address(0)) revert ZeroAddress();
        isAcceptedToken[token] = accepted;
        emit TokenAcceptanceSet(token, accepted);
    }

    function _requireSignedAndUsed(address token, Authorization calldata auth) private view {
        bytes32 domainSeparator;
        bool used;
        try IEIP3009(token).DOMAIN_SEPARATOR() returns (bytes32 separator) {
            domainSeparator = separator;
        } catch {
            revert NotAnAuthorizationToken(token);
        }
        try IEIP3009(token).authorizationState(auth.from, auth.nonce) returns (bool state) {
            used = state;
        } catch {
            revert NotAnAuthorizationToken(token);
        }
        bytes32 structHash = keccak256(
            abi.encode(
                TRANSFER_WITH_AUTHORIZATION_TYPEHASH,
                auth.from,
                auth.to,
                auth.value,
                auth.validAfter,
                auth.validBefore,
                auth.nonce
            )
        );
        bytes32 digest = MessageHashUtils.toTypedDataHash(domainSeparator, structHash);
        if (!SignatureChecker.isValidSignatureNow(auth.from, digest, auth.signature)) {
            revert InvalidAuthorizationSignature();
        }
        if (!used) revert AuthorizationNotUsed(token, auth.from, auth.nonce);
    }
}
