// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

/// @title TextRevertToken
/// @notice Test token that refuses as Circle's FiatToken (USDC on Celo and Base) does: a short
///         allowance or balance reverts with a text reason, not a named error
///         (circlefin/stablecoin-evm, contracts/v1/FiatTokenV1.sol: transferFrom and
///         _transfer). Used to prove the service names such a refusal from the chain's state.
contract TextRevertToken {
    string public constant name = "USD Coin (text reverts)";
    string public constant symbol = "USDC";
    uint8 public constant decimals = 6;
    uint256 public totalSupply;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);

    function mint(address to, uint256 amount) external {
        totalSupply += amount;
        balanceOf[to] += amount;
        emit Transfer(address(0), to, amount);
    }

    function approve(address spender, uint256 amount) external returns (bool) {
        allowance[msg.sender][spender] = amount;
        emit Approval(msg.sender, spender, amount);
        return true;
    }

    function transfer(address to, uint256 amount) external returns (bool) {
        _move(msg.sender, to, amount);
        return true;
    }

    function transferFrom(address from, address to, uint256 amount) public virtual returns (bool) {
        require(amount <= allowance[from][msg.sender], "ERC20: transfer amount exceeds allowance");
        _move(from, to, amount);
        allowance[from][msg.sender] -= amount;
        return true;
    }

    function _move(address from, address to, uint256 amount) private {
        require(amount <= balanceOf[from], "ERC20: transfer amount exceeds balance");
        balanceOf[from] -= amount;
        balanceOf[to] += amount;
        emit Transfer(from, to, amount);
    }
}
